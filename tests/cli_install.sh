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

# The README's embedding example, as written: the ```c block after
# "Embedding it", compiled against the install with pkg-config alone,
# linked to the shared library and, with `pkg-config --static`, to
# libkvtier.a (whatever the library links privately, the CUDA runtime when
# it is built in, must be listed there).
src=${KVT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
sed -n '/^Embedding it/,/^```$/p' "$src/README.md" | sed '1,/^```c$/d; /^```$/d' >"$work/embed.c"
grep -q 'int main' "$work/embed.c" || fail "README.md has no complete embedding example"
libdir=$(pkg-config --variable=libdir kvtier)
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $san "$work/embed.c" -o "$work/embed" $flags 2>"$work/cc.log" ||
	fail "the README's example does not compile: $(cat "$work/cc.log")"
LD_LIBRARY_PATH=$libdir "$work/embed" >"$work/embed.out" 2>&1 || fail "the README's example failed: $(cat "$work/embed.out")"
grep -qE "^kvtier [0-9.]+: 1 of 3 chunks cached, 33554432 bytes loaded, identical$" "$work/embed.out" ||
	fail "the README's example printed: $(cat "$work/embed.out")"
static=$(pkg-config --static --libs kvtier) || fail "pkg-config --static cannot resolve kvtier"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror $san "$work/embed.c" -o "$work/embed-static" $(pkg-config --cflags kvtier) \
	-Wl,--as-needed -Wl,-Bstatic -lkvtier -Wl,-Bdynamic $static 2>"$work/cc.log" ||
	fail "static link with pkg-config --static ($static): $(cat "$work/cc.log")"
ldd "$work/embed-static" | grep -q libkvtier && fail "the static link still needs libkvtier.so"
"$work/embed-static" >"$work/embed.out" 2>&1 || fail "the statically linked example failed: $(cat "$work/embed.out")"
grep -q "identical" "$work/embed.out" || fail "static example: $(cat "$work/embed.out")"
# The same example in a CMake project, with find_package(kvtier) alone:
# kvtier::kvtier (the shared library) and kvtier::static.
mkdir -p "$work/pkg"
cp "$work/embed.c" "$work/pkg/"
cat >"$work/pkg/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(embed C)
find_package(kvtier 0.2 REQUIRED)
add_executable(embed-shared embed.c)
target_link_libraries(embed-shared PRIVATE kvtier::kvtier)
add_executable(embed-static embed.c)
target_link_libraries(embed-static PRIVATE kvtier::static)
EOF
cmake -S "$work/pkg" -B "$work/pkg/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
	-DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$work/pkg.log" 2>&1 &&
	cmake --build "$work/pkg/build" >>"$work/pkg.log" 2>&1 ||
	fail "find_package(kvtier) does not build the example: $(tail -8 "$work/pkg.log")"
for e in embed-shared embed-static; do
	LD_LIBRARY_PATH=$libdir "$work/pkg/build/$e" >"$work/embed.out" 2>&1 &&
		grep -q "identical" "$work/embed.out" || fail "find_package's $e: $(cat "$work/embed.out")"
done
ldd "$work/pkg/build/embed-static" | grep -q libkvtier && fail "kvtier::static still needs libkvtier.so"
"$work/prefix/bin/kvtier" --version | grep -q "kvtier" || fail "installed kvtier does not run"
# A missing configuration file is an error that names it, not a silent run.
"$work/prefix/bin/kvtier" lookup --config "$work/absent.yaml" --tokens /dev/null >"$work/cfg.log" 2>&1 &&
	fail "a missing configuration file was accepted"
grep -q "absent.yaml: cannot open" "$work/cfg.log" || fail "missing configuration: $(cat "$work/cfg.log")"

# The command-line tool is a client of the public API: its sources, copied
# away from the rest of the tree, build against the installed headers and
# libraries alone (the planner's libkvtier_plan.a over the static
# libkvtier.a, and jansson, which it writes JSON with), and the result
# runs.  An internal header would not be found.
for f in "$work/prefix/include/kvtier/connector.h" "$work/prefix/include/kvtier/plan.h"; do
	[ -e "$f" ] || fail "$f not installed"
done
mkdir -p "$work/cli/cli"
cp "$src"/src/cli/*.c "$src"/src/cli/*.h "$work/cli/cli/"
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Werror $san -DKVT_PLANNER=1 -I"$work/cli" "$work"/cli/cli/*.c -o "$work/kvtier-cli" \
	$(pkg-config --cflags kvtier) -L"$libdir" -Wl,--as-needed -lkvtier_plan -Wl,-Bstatic -lkvtier \
	-Wl,-Bdynamic $static \
	$(pkg-config --cflags --libs jansson) -lm 2>"$work/cc.log" ||
	fail "the CLI does not build against the installed kvtier alone: $(head -5 "$work/cc.log")"
LD_LIBRARY_PATH=$libdir "$work/kvtier-cli" plan --help >"$work/plan.log" 2>&1 ||
	fail "the CLI built against the install has no planner: $(tail -3 "$work/plan.log")"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir kvtier) "$work/kvtier-cli" demo >"$work/demo.log" 2>&1 ||
	fail "the CLI built against the installed library fails its demo: $(tail -3 "$work/demo.log")"
grep -q "every byte verified" "$work/demo.log" || fail "demo: $(tail -3 "$work/demo.log")"
echo "cli_install: ok"
