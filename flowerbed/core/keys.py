"""Record keys shared by the server and the client: the only place they are spelt."""

#: ``RecordDict`` entries (the first two match Flower's FedAvg defaults).
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"

#: Keys inside the records.
NUM_EXAMPLES = "num-examples"  # Flower's FedAvg weights replies by this key
SERVER_ROUND = "server-round"  # set by Flower's strategies in train/evaluate configs
PROXIMAL_MU = "proximal-mu"  # set by Flower's FedProx in train configs
SCENARIO_YAML = "scenario-yaml"
SCENARIO_DIGEST = "scenario-digest"
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
JSON_PREFIX = "json:"  # config values Flower's ConfigRecord cannot hold travel as JSON

#: Message types the platform itself sends.
SETUP = "query.setup"
#: A local task: the learner's ``run_local`` on the client's own data (strategy ``local``).
LOCAL_TASK = "train.local"
#: Config keys of ``query.setup`` locating the client's persistent state.
STATE_DIR = "state-dir"
RUN_NAME = "run-name"
#: ``node_config`` key: a SuperNode's own folder for per-client state (deployment).
NODE_STATE_DIR = "state-dir"
#: Deletes the client's state folder at the end of a run (``clients.keep_state: false``).
STATE_CLEANUP = "query.state_cleanup"
#: ``RecordDict`` entry naming the client a message is for, with virtual clients
#: (:mod:`flowerbed.core.population`): a ``ConfigRecord`` of ``PARTITION_ID`` and
#: ``NUM_PARTITIONS``, removed before the learner sees the message.
VIRTUAL_CLIENT = "flowerbed-client"
