//go:build ignore

/*
 * sysfs.c: the kernel's view of goroce's devices, for programs that look
 * there (UCX, rdma-core's tests) rather than only ask libibverbs.
 *
 * libgoroce.so defines the libc calls such programs make on paths, and
 * sends a path under /sys/class/infiniband, /sys/class/infiniband_verbs
 * or /dev/infiniband to the same path under a tree the engine writes for
 * the process (sysfs.go: goroce_sysfs_root), every other path to libc
 * unchanged. The tree's /dev/infiniband/uverbsN is a plain empty file, as
 * a user cannot make a device node; the stat calls present it as the
 * character device rxe's uverbsN is (231:192+N, crw-rw-rw-), which is
 * what UCX's uct_ib checks before it takes a device.
 *
 * The calls are the ones a program or library can reach by symbol: libc's
 * own internal calls (fopen's open, opendir's, scandir's) bind inside
 * libc and are not seen, so each entry point is defined here rather than
 * one underneath. Their symbol versions are libc's (libibverbs.map), so
 * that a program's open@GLIBC_2.2.5 or stat@GLIBC_2.33 binds here.
 *
 * The tree is made at the first such path (loading the engine, as the
 * program's first verb would) and removed when the process that made it
 * exits; a child forked later shares its parent's.
 *
 * Built with the C compiler only (the //go:build ignore line keeps the Go
 * tool from compiling it into the package).
 */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))

/* The paths answered from the tree. */
static const char *const prefixes[] = {
	"/sys/class/infiniband",
	"/sys/class/infiniband_verbs",
	"/dev/infiniband",
};

static pthread_mutex_t root_mu = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX];
static size_t root_len;
static int root_state; /* 0: not asked yet; 1: root holds the tree; -1: none */
static pid_t root_pid; /* the process that made the tree removes it */
/* Set while this thread asks the engine for the tree: a path the engine's
 * loading opens goes to libc as it is. */
static __thread int asking;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

__attribute__((destructor)) static void remove_tree(void)
{
	if (root_state == 1 && getpid() == root_pid)
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int tree(void)
{
	int st;

	if (asking)
		return 0;
	pthread_mutex_lock(&root_mu);
	if (root_state == 0) {
		asking = 1;
		root_state = goroce_sysfs_root(root, sizeof(root)) ? -1 : 1;
		asking = 0;
		if (root_state == 1) {
			root_len = strlen(root);
			root_pid = getpid();
		}
	}
	st = root_state;
	pthread_mutex_unlock(&root_mu);
	return st == 1;
}

/* under reports whether path is prefix or below it. */
static int under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* mapped returns the path to use for path: the tree's copy (in buf) for
 * the paths the tree answers, path itself for every other. */
static const char *mapped(const char *path, char *buf, size_t n)
{
	size_t i;

	if (!path || path[0] != '/')
		return path;
	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (under(path, prefixes[i]))
			break;
	if (i == sizeof(prefixes) / sizeof(prefixes[0]) || !tree())
		return path;
	if ((size_t)snprintf(buf, n, "%s%s", root, path) >= n)
		return path;
	return buf;
}

/* uverbs returns N when path is /dev/infiniband/uverbsN, else -1. */
static int uverbs(const char *path)
{
	const char *p = "/dev/infiniband/uverbs";
	char *end;
	long n;

	if (!path || strncmp(path, p, strlen(p)) != 0)
		return -1;
	path += strlen(p);
	if (*path < '0' || *path > '9')
		return -1;
	n = strtol(path, &end, 10);
	return *end == '\0' && n < 64 ? (int)n : -1;
}

/* As rxe's node: crw-rw-rw- (udev's rule for uverbs), 231:192+N. */
static void as_chr(int n, struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return;
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = makedev(231, 192 + n);
	st->st_size = 0;
	st->st_blocks = 0;
}

#define REAL(ret, name, ...)                                                          \
	static ret (*real_##name)(__VA_ARGS__);                                      \
	static ret (*get_##name(void))(__VA_ARGS__)                                  \
	{                                                                            \
		if (!__atomic_load_n(&real_##name, __ATOMIC_ACQUIRE))                \
			__atomic_store_n(&real_##name, dlsym(RTLD_NEXT, #name),      \
					 __ATOMIC_RELEASE);                          \
		return real_##name;                                                  \
	}

/* A symbol libc lacks (an older libc, without statx or the 2.33 stat
 * functions) fails the call as libc would for an unknown call. */
#define CALL(name, fail, ...)                          \
	do {                                           \
		if (!get_##name()) {                   \
			errno = ENOSYS;                \
			return fail;                   \
		}                                      \
		return get_##name()(__VA_ARGS__);      \
	} while (0)

/* open's mode argument is there only with O_CREAT or O_TMPFILE. */
#define MODE(flags, mode)                                        \
	do {                                                     \
		if ((flags) & (O_CREAT | __O_TMPFILE)) {         \
			va_list ap;                              \
			va_start(ap, flags);                     \
			mode = va_arg(ap, mode_t);               \
			va_end(ap);                              \
		}                                                \
	} while (0)

REAL(int, open, const char *, int, ...)
REAL(int, open64, const char *, int, ...)
REAL(int, openat, int, const char *, int, ...)
REAL(int, openat64, int, const char *, int, ...)
REAL(int, __open_2, const char *, int)
REAL(int, __open64_2, const char *, int)
REAL(int, __openat_2, int, const char *, int)
REAL(int, __openat64_2, int, const char *, int)
REAL(FILE *, fopen, const char *, const char *)
REAL(FILE *, fopen64, const char *, const char *)
REAL(int, access, const char *, int)
REAL(int, faccessat, int, const char *, int, int)
REAL(int, euidaccess, const char *, int)
REAL(int, eaccess, const char *, int)
REAL(DIR *, opendir, const char *)
REAL(ssize_t, readlink, const char *, char *, size_t)
REAL(ssize_t, readlinkat, int, const char *, char *, size_t)
REAL(char *, realpath, const char *, char *)
REAL(char *, canonicalize_file_name, const char *)
REAL(int, stat, const char *, struct stat *)
REAL(int, stat64, const char *, struct stat64 *)
REAL(int, lstat, const char *, struct stat *)
REAL(int, lstat64, const char *, struct stat64 *)
REAL(int, fstatat, int, const char *, struct stat *, int)
REAL(int, fstatat64, int, const char *, struct stat64 *, int)
REAL(int, __xstat, int, const char *, struct stat *)
REAL(int, __xstat64, int, const char *, struct stat64 *)
REAL(int, __lxstat, int, const char *, struct stat *)
REAL(int, __lxstat64, int, const char *, struct stat64 *)
REAL(int, __fxstatat, int, int, const char *, struct stat *, int)
REAL(int, __fxstatat64, int, int, const char *, struct stat64 *, int)
REAL(int, statx, int, const char *, int, unsigned int, struct statx *)
REAL(ssize_t, getxattr, const char *, const char *, void *, size_t)
REAL(ssize_t, lgetxattr, const char *, const char *, void *, size_t)
REAL(ssize_t, listxattr, const char *, char *, size_t)
REAL(ssize_t, llistxattr, const char *, char *, size_t)

#define MAP(path) char buf_[PATH_MAX]; const char *p_ = mapped(path, buf_, sizeof(buf_))

EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MAP(path);

	MODE(flags, mode);
	CALL(open, -1, p_, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MAP(path);

	MODE(flags, mode);
	CALL(open64, -1, p_, flags, mode);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	MAP(path);

	MODE(flags, mode);
	CALL(openat, -1, dirfd, p_, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	MAP(path);

	MODE(flags, mode);
	CALL(openat64, -1, dirfd, p_, flags, mode);
}

EXPORT int __open_2(const char *path, int flags)
{
	MAP(path);
	CALL(__open_2, -1, p_, flags);
}

EXPORT int __open64_2(const char *path, int flags)
{
	MAP(path);
	CALL(__open64_2, -1, p_, flags);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	MAP(path);
	CALL(__openat_2, -1, dirfd, p_, flags);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	MAP(path);
	CALL(__openat64_2, -1, dirfd, p_, flags);
}

EXPORT FILE *fopen(const char *path, const char *mode)
{
	MAP(path);
	CALL(fopen, NULL, p_, mode);
}

EXPORT FILE *fopen64(const char *path, const char *mode)
{
	MAP(path);
	CALL(fopen64, NULL, p_, mode);
}

EXPORT int access(const char *path, int how)
{
	MAP(path);
	CALL(access, -1, p_, how);
}

EXPORT int faccessat(int dirfd, const char *path, int how, int flags)
{
	MAP(path);
	CALL(faccessat, -1, dirfd, p_, how, flags);
}

EXPORT int euidaccess(const char *path, int how)
{
	MAP(path);
	CALL(euidaccess, -1, p_, how);
}

EXPORT int eaccess(const char *path, int how)
{
	MAP(path);
	CALL(eaccess, -1, p_, how);
}

EXPORT DIR *opendir(const char *path)
{
	MAP(path);
	CALL(opendir, NULL, p_);
}

EXPORT ssize_t readlink(const char *path, char *out, size_t n)
{
	MAP(path);
	CALL(readlink, -1, p_, out, n);
}

EXPORT ssize_t readlinkat(int dirfd, const char *path, char *out, size_t n)
{
	MAP(path);
	CALL(readlinkat, -1, dirfd, p_, out, n);
}

EXPORT ssize_t __readlink_chk(const char *path, char *out, size_t n, size_t outlen)
{
	(void)outlen;
	return readlink(path, out, n);
}

/* The extended attributes (ls -l asks for ACLs): the tree's files have
 * none, as sysfs' have none. */
EXPORT ssize_t getxattr(const char *path, const char *name, void *value, size_t n)
{
	MAP(path);
	CALL(getxattr, -1, p_, name, value, n);
}

EXPORT ssize_t lgetxattr(const char *path, const char *name, void *value, size_t n)
{
	MAP(path);
	CALL(lgetxattr, -1, p_, name, value, n);
}

EXPORT ssize_t listxattr(const char *path, char *list, size_t n)
{
	MAP(path);
	CALL(listxattr, -1, p_, list, n);
}

EXPORT ssize_t llistxattr(const char *path, char *list, size_t n)
{
	MAP(path);
	CALL(llistxattr, -1, p_, list, n);
}

/* unmap turns a resolved path in the tree back into the path a program
 * asked about (the tree's root taken off the front). */
static char *unmap(char *resolved)
{
	if (resolved && root_len && strncmp(resolved, root, root_len) == 0 &&
	    (resolved[root_len] == '/' || resolved[root_len] == '\0'))
		memmove(resolved, resolved + root_len, strlen(resolved + root_len) + 1);
	return resolved;
}

EXPORT char *realpath(const char *path, char *resolved)
{
	MAP(path);
	if (!get_realpath()) {
		errno = ENOSYS;
		return NULL;
	}
	return p_ == path ? get_realpath()(path, resolved) : unmap(get_realpath()(p_, resolved));
}

EXPORT char *__realpath_chk(const char *path, char *resolved, size_t n)
{
	(void)n;
	return realpath(path, resolved);
}

EXPORT char *canonicalize_file_name(const char *path)
{
	MAP(path);
	if (!get_canonicalize_file_name()) {
		errno = ENOSYS;
		return NULL;
	}
	return p_ == path ? get_canonicalize_file_name()(path) : unmap(get_canonicalize_file_name()(p_));
}

/* The stat family: the call on the mapped path, then uverbsN presented as
 * its character device. */
#define STAT(name, stype, call)                            \
	do {                                               \
		int n_ = uverbs(path), rc_;                \
		if (!get_##name()) {                       \
			errno = ENOSYS;                    \
			return -1;                         \
		}                                          \
		rc_ = call;                                \
		if (rc_ == 0 && n_ >= 0 && p_ != path)     \
			as_chr(n_, (struct stat *)(stype *)st); \
		return rc_;                                \
	} while (0)

EXPORT int stat(const char *path, struct stat *st)
{
	MAP(path);
	STAT(stat, struct stat, get_stat()(p_, st));
}

EXPORT int stat64(const char *path, struct stat64 *st)
{
	MAP(path);
	STAT(stat64, struct stat64, get_stat64()(p_, st));
}

EXPORT int lstat(const char *path, struct stat *st)
{
	MAP(path);
	STAT(lstat, struct stat, get_lstat()(p_, st));
}

EXPORT int lstat64(const char *path, struct stat64 *st)
{
	MAP(path);
	STAT(lstat64, struct stat64, get_lstat64()(p_, st));
}

EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	MAP(path);
	STAT(fstatat, struct stat, get_fstatat()(dirfd, p_, st, flags));
}

EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	MAP(path);
	STAT(fstatat64, struct stat64, get_fstatat64()(dirfd, p_, st, flags));
}

/* The entry points of programs built against glibc before 2.33. */
EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	MAP(path);
	STAT(__xstat, struct stat, get___xstat()(ver, p_, st));
}

EXPORT int __xstat64(int ver, const char *path, struct stat64 *st)
{
	MAP(path);
	STAT(__xstat64, struct stat64, get___xstat64()(ver, p_, st));
}

EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
	MAP(path);
	STAT(__lxstat, struct stat, get___lxstat()(ver, p_, st));
}

EXPORT int __lxstat64(int ver, const char *path, struct stat64 *st)
{
	MAP(path);
	STAT(__lxstat64, struct stat64, get___lxstat64()(ver, p_, st));
}

EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	MAP(path);
	STAT(__fxstatat, struct stat, get___fxstatat()(ver, dirfd, p_, st, flags));
}

EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	MAP(path);
	STAT(__fxstatat64, struct stat64, get___fxstatat64()(ver, dirfd, p_, st, flags));
}

EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *st)
{
	int n = uverbs(path), rc;
	MAP(path);

	if (!get_statx()) {
		errno = ENOSYS;
		return -1;
	}
	rc = get_statx()(dirfd, p_, flags, mask, st);
	if (rc == 0 && n >= 0 && p_ != path && (st->stx_mode & S_IFMT) == S_IFREG) {
		st->stx_mode = S_IFCHR | 0666;
		st->stx_rdev_major = 231;
		st->stx_rdev_minor = 192 + n;
		st->stx_size = 0;
		st->stx_blocks = 0;
	}
	return rc;
}
