/*
 * The library loaded with dlopen(), as a Python extension or a plugin loads it:
 * `dl_check LIBRINGCOMM_SO`.
 *
 *  1. unloaded under a live communicator: two processes, each dlopen()s the library and joins a
 *     2-rank job; rank 1 dlclose()s it without ring_comm_destroy, then rank 0 destroys its
 *     side, which wakes rank 1's watcher thread. That thread ran in unmapped code (SIGSEGV)
 *     until the library was linked -z nodelete: it is never unloaded now.
 *  2. loaded and unloaded 20 times with a 1-rank communicator made and destroyed each time, the
 *     log on (RING_DEBUG=WARN): open descriptors must not grow (the log's copy of stderr and
 *     the topology cache were left behind by each unload).
 *
 * Uses only the public API, through dlsym. Exit status: 0 passed, 1 a check failed, 2 setup.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "free_port.h"
#include "ringcomm.h"

typedef ring_result_t (*init_fn)(ring_comm_t **, int, int, const char *);
typedef ring_result_t (*destroy_fn)(ring_comm_t *);

static const char *lib;

static void *load(init_fn *init, destroy_fn *destroy)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dl_check: dlopen %s: %s\n", lib, dlerror());
        exit(2);
    }
    *init = (init_fn)(uintptr_t)dlsym(h, "ring_comm_init");
    *destroy = (destroy_fn)(uintptr_t)dlsym(h, "ring_comm_destroy");
    if (!*init || !*destroy) {
        fprintf(stderr, "dl_check: %s has no ring_comm_init/ring_comm_destroy\n", lib);
        exit(2);
    }
    return h;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int unload_under_a_live_communicator(void)
{
    char root[64];
    snprintf(root, sizeof root, "127.0.0.1:%d", free_port());
    pid_t kid[2];
    for (int r = 0; r < 2; r++) {
        kid[r] = fork();
        if (kid[r] < 0) return 2;
        if (kid[r] == 0) {
            init_fn init;
            destroy_fn destroy;
            void *h = load(&init, &destroy);
            ring_comm_t *c = NULL;
            ring_result_t rc = init(&c, 2, r, root);
            if (rc != RING_OK) {
                fprintf(stderr, "dl_check: rank %d: init: %d\n", r, (int)rc);
                _exit(2);
            }
            if (r == 1) {
                dlclose(h); /* no destroy: a framework that forgot it */
                sleep(3);   /* rank 0 leaves meanwhile; our watcher sees it */
                _exit(0);
            }
            sleep(1);
            destroy(c);
            _exit(0);
        }
    }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(kid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "dl_check: unloaded under a live communicator: rank %d %s %d\n", r,
                    WIFSIGNALED(st) ? "killed by signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            bad = 1;
        }
    }
    return bad;
}

static int load_unload_cycles(void)
{
    setenv("RING_DEBUG", "WARN", 1);
    int first = -1;
    for (int i = 0; i < 20; i++) {
        init_fn init;
        destroy_fn destroy;
        void *h = load(&init, &destroy);
        ring_comm_t *c = NULL;
        if (init(&c, 1, 0, NULL) != RING_OK || destroy(c) != RING_OK) {
            fprintf(stderr, "dl_check: cycle %d: a one-rank communicator failed\n", i);
            return 1;
        }
        dlclose(h);
        if (i == 0) first = open_fds();
    }
    int last = open_fds();
    if (last > first) {
        fprintf(stderr, "dl_check: 19 more load/unload cycles left %d more open descriptors (%d -> %d)\n", last - first,
                first, last);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dl_check LIBRINGCOMM_SO\n");
        return 2;
    }
    lib = argv[1];
    int bad = unload_under_a_live_communicator();
    if (bad == 2) return 2;
    bad |= load_unload_cycles();
    if (!bad) printf("dl_check: passed (unload under a live communicator, 20 load/unload cycles)\n");
    return bad;
}
