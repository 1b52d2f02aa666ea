"""kvtier in vLLM: the KV connector (kvtier.vllm.connector.KvtierConnector).

vLLM finds it by name.  The kvtier wheel declares a `vllm.general_plugins`
entry point, `kvtier = kvtier_vllm_plugin:register`, which vLLM runs in each
of its processes; it registers the connector with vLLM's own
KVConnectorFactory, so that

    vllm serve MODEL --kv-transfer-config \\
        '{"kv_connector":"KvtierConnector","kv_role":"kv_both"}'

needs no module path (docs/PYTHON.md lists the extra_config keys).  The
older spelling with "kv_connector_module_path":"kvtier.vllm" still works:
this package hands out the class by that name too.

Nothing here imports vLLM until the connector is used, and `import kvtier`
never imports an engine.
"""

from kvtier_vllm_plugin import CONNECTOR_NAME, register  # noqa: F401

# The vLLM versions the connector was written and tested against; an older
# one is refused with this message when the engine starts, a newer one
# works with a note in the log.
MIN_VLLM = (0, 32)
TESTED_VLLM = "0.32.0"


def __getattr__(name):
    # kv_connector_module_path="kvtier.vllm": vLLM imports this package and
    # takes the class by name.
    if name == CONNECTOR_NAME:
        from .connector import KvtierConnector
        return KvtierConnector
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
