/*
 * fuzz_vals.c — libFuzzer target for kvtierd's reader of value and
 * tombstone trailers (src/daemon/values.c trailer_parse; the format in
 * values.h and docs/DAEMON.md).
 *
 * The bytes are outside bytes: the rebuild reads them from the disk tiers
 * (kvt_store_peek), unverified by any layer checksum.  The input is the
 * tail of an object, the trailer last.  Checked for every input:
 *  - the parse reads nothing before the `have` bytes it is given (the
 *    input is copied to the end of an exact allocation, so ASan sees any
 *    byte before or after);
 *  - -1 only for a key longer than what it was given, with the length it
 *    needs, at most VALS_MAX_KEY + VALS_TRAILER;
 *  - a kind it returns is one of the four, its key inside the input and
 *    ending where the fixed fields start;
 *  - a checksummed trailer it accepts is one encode_trailer writes from
 *    the fields parsed, byte for byte.
 *
 * values.c is compiled into this file rather than linked (the daemon is
 * no part of the library archive).
 *
 *   ./fuzz_vals -max_len=9000 fuzz/corpus/vals
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.c"
#include "daemon/values.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1), *again;
	struct trailer tr;
	size_t need = 0;
	int kind;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	kind = trailer_parse(buf + size, size, &tr, &need);
	if (kind < 0) {
		if (kind != -1 || need <= size || need > VALS_MAX_KEY + VALS_TRAILER)
			abort();
	} else if (kind > 0) {
		const uint8_t *key = (const uint8_t *)tr.key;
		if (kind > OBJ_FLS || key < buf || key + tr.klen != buf + size - VALS_TRAILER)
			abort();
		if (kind != OBJ_V1) {
			static const char *const magic[] = { MAGIC_V1, MAGIC_VAL, MAGIC_DEL,
							     MAGIC_FLS };
			size_t n = tr.klen + VALS_TRAILER;
			if (!(again = malloc(n)))
				abort();
			encode_trailer(again, magic[kind - 1], tr.key, tr.klen, tr.vlen, tr.seq,
				       tr.nonce, tr.exp);
			if (memcmp(again, buf + size - n, n))
				abort();
			free(again);
		}
	}
	free(buf);
	return 0;
}
