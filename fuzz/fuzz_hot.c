/*
 * fuzz_hot.c — libFuzzer target for the hot list reader (kvt_hot_parse,
 * src/store/warm.c): the file a restarted kvtierd warms its first tier
 * from, which a crash, a full disk or an operator may have damaged.
 *
 * Every input is refused with a message or read whole: a list it accepts
 * holds exactly (len - 24) / 32 keys, all within the input.
 *
 *   ./fuzz_hot fuzz/corpus/hot
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "store/warm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	kvt_key *keys;
	size_t n;
	int rc = kvt_hot_parse(data, size, &keys, &n);

	if (rc == 0) {
		assert(size >= 24 && n == (size - 24) / 32);
		for (size_t i = 0; i < n; i++)
			assert(!memcmp(keys[i].b, data + 16 + i * 32, 32));
		free(keys);
	} else {
		assert(keys == NULL && n == 0 && kvt_errmsg()[0]);
	}
	return 0;
}
