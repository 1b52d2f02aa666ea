"""kvtier's vLLM plugin: the `vllm.general_plugins` entry point of the kvtier
wheel (`kvtier = kvtier_vllm_plugin:register`), which vLLM runs in each of
its processes before it reads its configuration.

It registers kvtier's connector with vLLM's KVConnectorFactory by name and
module path, and imports nothing of kvtier: a vLLM that does not use kvtier
pays nothing for it, and a kvtier installation that cannot load (its
library missing, or of another version) fails where the connector is
created, with kvtier's message, rather than as an unknown connector name.
It is a package of its own, beside `kvtier`, for that reason: importing
any module inside `kvtier` loads the library first.
"""

CONNECTOR_NAME = "KvtierConnector"
CONNECTOR_MODULE = "kvtier.vllm.connector"


def register():
    """Make KvtierConnector known to vLLM's KVConnectorFactory, so that
    --kv-transfer-config '{"kv_connector":"KvtierConnector",...}' finds it.
    Safe to call more than once."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    try:
        KVConnectorFactory.register_connector(CONNECTOR_NAME, CONNECTOR_MODULE, CONNECTOR_NAME)
    except ValueError:
        pass  # registered already in this process
