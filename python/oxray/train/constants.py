"""`ray.train.constants`: the names of environment variables Ray Train reads that oxray
honors too, and of result keys."""

# The result key naming a reported checkpoint's directory (`checkpoint_000000`), or None.
CHECKPOINT_DIR_NAME = "checkpoint_dir_name"

# Seconds each worker waits for `torch.distributed.destroy_process_group()` when its
# group shuts down; after that the group is stopped anyway (the workers are ended).
TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S = "TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S"
DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S = 30

# The dataset key `get_dataset_shard()` defaults to in Ray's examples.
TRAIN_DATASET_KEY = "train"
