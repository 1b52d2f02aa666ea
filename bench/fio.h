/*
 * fio.h — the one fio driver of kvtier-bench: find fio on PATH, ask its
 * version, run one sequential job on a directory and read its bandwidth.
 *
 * The job, exactly (the bound of `kvtier-bench nvme`):
 *   fio --name=kvtier-bound --directory=DIR --ioengine=io_uring --direct=1
 *       --rw=write|read --bs=BS --iodepth=16 --numjobs=1 --size=SIZE
 *       --output-format=json --output=OUT
 * run as a child process without a shell; the bandwidth is
 * jobs[0].<write|read>.bw_bytes of its JSON (read with jansson).  The write
 * job creates the file (fallocate'd up front, random buffer contents); a
 * read job after it reads that same file back.
 */
#ifndef KVT_BENCH_FIO_H
#define KVT_BENCH_FIO_H

#include <stdint.h>

struct bench_fio {
	char path[1024];   /* the fio binary */
	char version[64];  /* "fio-3.33", or "unknown" */
};

/* fio on PATH into f->path: 1, or 0 if there is none. */
int bench_fio_find(struct bench_fio *f);

/* `fio --version` into f->version; scratch names a directory for its
 * output file. */
void bench_fio_version(struct bench_fio *f, const char *scratch);

/* One job over scratch/fio: op is "write" or "read"; bytes/s as GB/s
 * (1e9 B/s) into *gbps.  0, or 1 after printing the command and what fio
 * said.  `cmd` names the benchmark in messages. */
int bench_fio_run(const struct bench_fio *f, const char *cmd, const char *scratch,
		  const char *op, uint64_t bs, uint64_t size, double *gbps);

/* Remove scratch/fio (the job's file). */
void bench_fio_clean(const char *scratch);

/* The job's command line as documented above, for reports. */
#define BENCH_FIO_COMMAND                                                         \
	"fio --name=kvtier-bound --directory=DIR/fio --ioengine=io_uring --direct=1 " \
	"--rw=write|read --bs=CHUNK --iodepth=16 --numjobs=1 --size=N*CHUNK "       \
	"--output-format=json --output=DIR/fio.json"

#endif
