// clockshim: an LD_PRELOAD library that shifts a process's wall clock.
//
// clock_gettime(CLOCK_REALTIME and CLOCK_REALTIME_COARSE), gettimeofday and
// time return the real wall time plus an offset in nanoseconds, read as a
// decimal integer from the file named by CLOCKSHIM_OFFSET_FILE. The file is
// read again at most once a millisecond (by CLOCK_MONOTONIC, which is never
// shifted), so a test steps the clock by rewriting the file. A missing or
// unreadable file leaves the last offset (0 at start).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic(clock_gettime_fn) real_clock_gettime;
static _Atomic long long offset_ns;
static _Atomic long long next_read_ns;

static int real_now(clockid_t id, struct timespec *ts) {
	clock_gettime_fn f = atomic_load(&real_clock_gettime);
	if (f == NULL) {
		return (int)syscall(SYS_clock_gettime, id, ts);
	}
	return f(id, ts);
}

__attribute__((constructor)) static void clockshim_init(void) {
	atomic_store(&real_clock_gettime, (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime"));
}

static long long ns(const struct timespec *ts) {
	return (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

// offset is the current offset, re-read from the file at most once a ms.
static long long offset(void) {
	struct timespec m;
	if (real_now(CLOCK_MONOTONIC, &m) == 0) {
		long long now = ns(&m), next = atomic_load(&next_read_ns);
		if (now >= next && atomic_compare_exchange_strong(&next_read_ns, &next, now + 1000000LL)) {
			const char *path = getenv("CLOCKSHIM_OFFSET_FILE");
			int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
			if (fd >= 0) {
				char buf[32];
				ssize_t n = read(fd, buf, sizeof buf - 1);
				close(fd);
				if (n > 0) {
					buf[n] = 0;
					atomic_store(&offset_ns, strtoll(buf, NULL, 10));
				}
			}
		}
	}
	return atomic_load(&offset_ns);
}

static int shifted(clockid_t id, struct timespec *ts) {
	int rc = real_now(id, ts);
	if (rc != 0) {
		return rc;
	}
	long long t = ns(ts) + offset();
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	if (ts->tv_nsec < 0) {
		ts->tv_nsec += 1000000000LL;
		ts->tv_sec--;
	}
	return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
		return shifted(id, ts);
	}
	return real_now(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz;
	struct timespec ts;
	int rc = shifted(CLOCK_REALTIME, &ts);
	if (rc == 0 && tv != NULL) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return rc;
}

time_t time(time_t *out) {
	struct timespec ts;
	if (shifted(CLOCK_REALTIME, &ts) != 0) {
		return (time_t)-1;
	}
	if (out != NULL) {
		*out = ts.tv_sec;
	}
	return ts.tv_sec;
}
