"""`oxray.tune.result`: the names of the keys Tune fills in each result and of the files it
writes in each trial's directory, as Ray's module names them (`tune.result.TRAINING_ITERATION`,
`tune.result.EXPR_PROGRESS_FILE`, ...). `oxray.air.constants` re-exports the ones Ray keeps there."""

DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
TRAINING_ITERATION = "training_iteration"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TIMESTAMP = "timestamp"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
HOSTNAME = "hostname"
NODE_IP = "node_ip"
PID = "pid"
DATE = "date"
TIME_SINCE_RESTORE = "time_since_restore"
TIMESTEPS_SINCE_RESTORE = "timesteps_since_restore"
ITERATIONS_SINCE_RESTORE = "iterations_since_restore"
TRIAL_INFO = "__trial_info__"
CONFIG_PREFIX = "config"
# The key a function trainable's returned value (not a dict) is reported under.
DEFAULT_METRIC = "_metric"
# Names of common metrics, kept for the scripts that import them.
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
# The keys Tune adds to every result (Ray's `AUTO_RESULT_KEYS`).
AUTO_RESULT_KEYS = (
    TRAINING_ITERATION,
    TIME_TOTAL_S,
    EPISODES_TOTAL,
    TIMESTEPS_TOTAL,
    NODE_IP,
    HOSTNAME,
    PID,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    DATE,
    TIME_SINCE_RESTORE,
    TIMESTEPS_SINCE_RESTORE,
    ITERATIONS_SINCE_RESTORE,
    CONFIG_PREFIX,
)
# A trial's files (in its directory, `<experiment>/<trial dir>/`).
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_PROGRESS_FILE = "progress.csv"
EXPR_RESULT_FILE = "result.json"
EXPR_ERROR_PICKLE_FILE = "error.pkl"
EXPR_ERROR_FILE = "error.txt"
