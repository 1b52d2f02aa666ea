#!/usr/bin/env bash
# `cmake --install` puts the library, the header, the pkg-config file and the
# binary in place, and a program built against them with pkg-config alone
# (as an embedder would) stores and loads a chunk.
set -u
kvtier=${1:?usage: cli_install.sh path/to/kvtier}
build=$(cd "$(dirname "$kvtier")" && pwd)
work=$(mktemp -d /tmp/kvt-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL $*"; exit 1; }
# A sanitizer build's library needs its runtime in the embedding program:
# build the embedder the same way (an embedder of such a build would).
san=
grep -qE '^KVT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && san="-fsanitize=address,undefined"
grep -qE '^KVT_TSAN:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && san="-fsanitize=thread"

cmake --install "$build" --prefix "$work/prefix" >"$work/log" 2>&1 || fail "install: $(tail -5 "$work/log")"
pcdir=$(find "$work/prefix" -name kvtier.pc -printf "%h\n" | head -1)
[ -n "$pcdir" ] || fail "no kvtier.pc installed"
for f in "$work/prefix/include/kvtier.h" "$work/prefix/bin/kvtier"; do
	[ -e "$f" ] || fail "$f not installed"
done
export PKG_CONFIG_PATH=$pcdir
flags=$(pkg-config --cflags --libs kvtier) || fail "pkg-config cannot resolve kvtier"

cat >"$work/embed.c" <<'C'
#include <kvtier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	int err;
	kvt_config *cfg = kvt_config_new();
	kvt_config_set(cfg, "max_local_cpu_size", "16MiB");
	kvt_config_set(cfg, "dram_lock_memory", "false");
	kvt_store *st = kvt_store_open(cfg, &err);
	kvt_config_free(cfg);
	if (!st) {
		fprintf(stderr, "open: %s\n", kvt_strerror(err));
		return 1;
	}
	kvt_ns_desc d = { .model = "embed/test",
			  .layout = { 2, 2, 16, KVT_DTYPE_BF16, 2, 0, 16, 64 } };
	kvt_ns ns;
	uint32_t tokens[128];
	kvt_key keys[2];
	for (int i = 0; i < 128; i++)
		tokens[i] = (uint32_t)i;
	if (kvt_ns_init(st, &d, &ns) || kvt_key_chain(&ns, tokens, 128, NULL, keys, 2) != 2)
		return 1;
	size_t len = kvt_layout_payload_bytes(&ns.layout), got;
	unsigned char *a = malloc(len), *b = malloc(len);
	memset(a, 0x5a, len);
	if (kvt_put(st, &ns, &keys[0], a, len, KVT_DUR_CACHED) ||
	    kvt_lookup(st, &ns, keys, 2, NULL) != 1 ||
	    kvt_get(st, &ns, &keys[0], b, len, &got) || memcmp(a, b, len))
		return 1;
	printf("embedded kvtier %s: stored and loaded %zu bytes\n", KVT_VERSION_STRING, got);
	kvt_store_close(st);
	free(a);
	free(b);
	return 0;
}
C
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror $san "$work/embed.c" -o "$work/embed" $flags 2>"$work/cc.log" || fail "compile: $(cat "$work/cc.log")"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir kvtier) "$work/embed" || fail "the embedded program failed"
"$work/prefix/bin/kvtier" --version | grep -q "kvtier" || fail "installed kvtier does not run"

# The command-line tool is a client of the public library like any other:
# its sources, copied away from the rest of the tree, build against the
# installed header and library alone (and jansson, which it writes JSON
# with), and the result runs.  An internal header would not be found.
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
mkdir -p "$work/cli/cli"
cp "$src"/src/cli/*.c "$src"/src/cli/*.h "$work/cli/cli/"
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Werror $san -I"$work/cli" "$work"/cli/cli/*.c -o "$work/kvtier-cli" \
	$flags $(pkg-config --cflags --libs jansson) -lm 2>"$work/cc.log" ||
	fail "the CLI does not build against the installed kvtier.h alone: $(head -5 "$work/cc.log")"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir kvtier) "$work/kvtier-cli" demo >"$work/demo.log" 2>&1 ||
	fail "the CLI built against the installed library fails its demo: $(tail -3 "$work/demo.log")"
grep -q "every byte verified" "$work/demo.log" || fail "demo: $(tail -3 "$work/demo.log")"
echo "cli_install: ok"
