"""kvtier in vLLM: the KV connector (kvtier.vllm.connector.KvtierConnector).

vLLM finds it by name.  The kvtier wheel declares a `vllm.general_plugins`
entry point, `kvtier = kvtier.vllm:register`, which vLLM runs in each of its
processes; it registers the connector with vLLM's own KVConnectorFactory,
so that

    vllm serve MODEL --kv-transfer-config \\
        '{"kv_connector":"KvtierConnector","kv_role":"kv_both"}'

needs no module path (docs/PYTHON.md lists the extra_config keys).  The
older spelling with "kv_connector_module_path":"kvtier.vllm" still works:
this package hands out the class by that name too.

Nothing here imports vLLM until the connector is used: registering is a
name and a module path, and `import kvtier` never imports an engine.
"""

CONNECTOR_NAME = "KvtierConnector"
CONNECTOR_MODULE = "kvtier.vllm.connector"

# The vLLM versions the connector was written and tested against; an older
# one is refused with this message when the engine starts, a newer one
# works with a warning.
MIN_VLLM = (0, 32)
TESTED_VLLM = "0.32.0"


def register():
    """vLLM's general plugin: make KvtierConnector known to vLLM's
    KVConnectorFactory.  Safe to call more than once, and in a vLLM that
    will not use kvtier: it imports nothing of kvtier's connector, and a
    vLLM the connector does not support fails only when the connector is
    asked for, with a message naming the version needed."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    try:
        KVConnectorFactory.register_connector(CONNECTOR_NAME, CONNECTOR_MODULE, CONNECTOR_NAME)
    except ValueError:
        pass  # registered already in this process


def __getattr__(name):
    # kv_connector_module_path="kvtier.vllm": vLLM imports this package and
    # takes the class by name.
    if name == CONNECTOR_NAME:
        from .connector import KvtierConnector
        return KvtierConnector
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
