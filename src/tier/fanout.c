/*
 * fanout.c — durability of the file tiers' directory tree.
 *
 * POSIX makes a new name durable only when the directory holding it is
 * fsynced, and the same holds for each directory's own name in its parent.
 * A power-safe chunk therefore needs its file, its directory <root>/k0/k1,
 * and the entries of k1 in k0, k0 in root and root in its parent to have
 * reached the disk.  The last three rarely change, so each is fsynced once
 * per tier and remembered.
 */
#include "tier/fanout.h"

#include <limits.h>
#include <string.h>

#include "common/err.h"

static int sync_parent(kvt_io *io, const char *dir)
{
	int rc = kvt_io_fsync_parent(io, dir);
	if (rc)
		return kvt_err(rc, "fsync of the directory holding %s: %s", dir,
			       kvt_strerror(rc));
	return 0;
}

int kvt_fanout_durable(kvt_fanout *f, kvt_io *io, const char *root,
		       const kvt_key *key, const char *fin)
{
	size_t rl = strlen(root);
	unsigned k0 = key->b[0], k01 = (unsigned)key->b[0] << 8 | key->b[1];
	char dir[PATH_MAX];
	int rc;

	if (rl + 7 > sizeof(dir) || strncmp(fin, root, rl))
		return kvt_err(KVT_EINVAL, "%s is not under %s", fin, root);
	if (!atomic_load(&f->root)) {
		if ((rc = sync_parent(io, root)))
			return rc;
		atomic_store(&f->root, 1);
	}
	if (!atomic_load(&f->k0[k0])) {
		memcpy(dir, fin, rl + 3); /* "<root>/k0" */
		dir[rl + 3] = '\0';
		if ((rc = sync_parent(io, dir)))
			return rc;
		atomic_store(&f->k0[k0], 1);
	}
	if (!atomic_load(&f->k1[k01])) {
		memcpy(dir, fin, rl + 6); /* "<root>/k0/k1" */
		dir[rl + 6] = '\0';
		if ((rc = sync_parent(io, dir)))
			return rc;
		atomic_store(&f->k1[k01], 1);
	}
	return 0;
}
