/*
 * fuzz_peer.c — libFuzzer target for the peer tier's reply reader
 * (src/proto/resp_client.c, resp_read_reply): the bytes another node's daemon
 * sends back, which may be anything a broken or hostile peer writes.
 *
 * The input is a stream of replies.  Its first byte sets how many bytes
 * each read of the source returns (1..64, so replies split anywhere are
 * reached) and whether bulks go to a malloc'd buffer or, as the tier's
 * get_into reads them, into reserved segments (two, of uneven sizes); the
 * reader is called until it fails or the input ends.  Every accepted bulk
 * is at most the cap and its bytes are the input's; an integer or status
 * reply carries no data.
 *
 *   ./fuzz_peer -max_len=4096 fuzz/corpus/peer
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "proto/resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t seg_a[300], seg_b[1024];
static struct iovec segs[2] = { { seg_a, sizeof(seg_a) }, { seg_b, sizeof(seg_b) } };

static int reserve(void *arg, uint64_t len, const struct iovec **iov, int *n_iov)
{
	(void)arg;
	if (len > sizeof(seg_a) + sizeof(seg_b))
		abort(); /* the cap was checked before */
	*iov = segs;
	*n_iov = 2;
	return 0;
}

struct src {
	const uint8_t *p;
	size_t left, step;
};

static long from_input(void *arg, void *buf, size_t len)
{
	struct src *s = arg;
	size_t n = len < s->step ? len : s->step;

	if (n > s->left)
		n = s->left;
	memcpy(buf, s->p, n);
	s->p += n;
	s->left -= n;
	return (long)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char stash[4096];
	struct src s;
	size_t n = 0;

	if (size < 1)
		return 0;
	s = (struct src){ data + 1, size - 1, (size_t)(data[0] % 64) + 1 };
	int into = data[0] & 64;
	for (int i = 0; i < 64; i++) {
		struct resp_reply r;
		if (resp_read_reply(from_input, &s, stash, sizeof(stash), &n, 1024,
					into ? reserve : NULL, NULL, &r))
			break;
		if (into) {
			if (r.data)
				abort();
		} else if (r.type == '$' && r.num >= 0) {
			if (!r.data || r.num > 1024)
				abort();
		} else if (r.data) {
			abort();
		}
		free(r.data);
	}
	return 0;
}
