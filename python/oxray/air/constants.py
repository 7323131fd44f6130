"""`oxray.air.constants` (`ray.air.constants`): the result keys and trial file names Ray keeps
in this module (the same values as `oxray.tune.result`, from where they come)."""

from oxray.train.constants import TRAIN_DATASET_KEY
from oxray.tune.result import (
    EXPR_ERROR_FILE,
    EXPR_ERROR_PICKLE_FILE,
    EXPR_PARAM_FILE,
    EXPR_PARAM_PICKLE_FILE,
    EXPR_PROGRESS_FILE,
    EXPR_RESULT_FILE,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTAMP,
    TRAINING_ITERATION,
)

# Keys of Ray AIR's checkpoint dicts and dataset configs, kept for scripts that import them.
PREPROCESSOR_KEY = "_preprocessor"
MODEL_KEY = "model"
EVALUATION_DATASET_KEY = "evaluation"
WILDCARD_KEY = "*"
TENSOR_COLUMN_NAME = "__value__"
MAX_REPR_LENGTH = int(80 * 1.5)
# The checkpoint metadata file of Ray's class trainables.
CHECKPOINT_TUNE_METADATA_FILE = ".tune_metadata"
COPY_DIRECTORY_CHECKPOINTS_INSTEAD_OF_MOVING_ENV = "TRAIN_COPY_DIRECTORY_CHECKPOINTS_INSTEAD_OF_MOVING"
AIR_ENV_VARS = {COPY_DIRECTORY_CHECKPOINTS_INSTEAD_OF_MOVING_ENV, "RAY_AIR_FULL_TRACEBACKS", "RAY_AIR_NEW_OUTPUT"}

__all__ = [
    "CHECKPOINT_TUNE_METADATA_FILE",
    "EVALUATION_DATASET_KEY",
    "EXPR_ERROR_FILE",
    "EXPR_ERROR_PICKLE_FILE",
    "EXPR_PARAM_FILE",
    "EXPR_PARAM_PICKLE_FILE",
    "EXPR_PROGRESS_FILE",
    "EXPR_RESULT_FILE",
    "MAX_REPR_LENGTH",
    "MODEL_KEY",
    "PREPROCESSOR_KEY",
    "TENSOR_COLUMN_NAME",
    "TIMESTAMP",
    "TIME_THIS_ITER_S",
    "TIME_TOTAL_S",
    "TRAINING_ITERATION",
    "TRAIN_DATASET_KEY",
    "WILDCARD_KEY",
]
