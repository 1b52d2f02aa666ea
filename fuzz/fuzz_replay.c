/*
 * fuzz_replay.c — libFuzzer target for the KV event publisher's replay
 * request reader (kvt_events_replay_parse, src/store/events.c).
 *
 * The request comes from any peer that can reach the replay socket.  The
 * input is cut into frames the way ZeroMQ would deliver them: each frame
 * is a length byte and that many bytes (the last frame takes what is
 * left).  The reader must answer every shape with either a start sequence
 * or a message, never read past a frame, and accept exactly the two-frame
 * form it documents.
 *
 *   ./fuzz_replay fuzz/corpus/replay
 */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "store/events.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const void *frame[16];
	size_t len[16];
	uint64_t start;
	const char *why;
	int n = 0;

	while (size && n < 16) {
		size_t l = data[0];
		data++, size--;
		if (l > size)
			l = size;
		frame[n] = data;
		len[n++] = l;
		data += l;
		size -= l;
	}
	why = kvt_events_replay_parse(frame, len, n, &start);
	if (!why) {
		assert(n == 2 && len[0] == 0 && len[1] == 8);
		assert(!(start >> 63));
	} else {
		assert(strlen(why) > 0);
	}
	return 0;
}
