/*
 * Knobs a developer exported must not change what a test checks: unset every RING_* variable
 * except the harness's own (RING_TEST_*) and logging (RING_DEBUG*, so that a failing run can be
 * repeated with it). A new parameter needs no entry anywhere. Shared by the Criterion suites.
 */
#ifndef RING_TEST_CLEAR_ENV_H
#define RING_TEST_CLEAR_ENV_H

#include <stdlib.h>
#include <string.h>

extern char **environ;

static void clear_ring_env(void)
{
    /* One name at a time, the walk restarted after each unsetenv (which moves environ's
     * entries): no cap on how many there are. */
    for (;;) {
        char name[128] = "";
        for (char **e = environ; *e && !name[0]; e++) {
            if (strncmp(*e, "RING_", 5) != 0 || strncmp(*e, "RING_TEST_", 10) == 0 || strncmp(*e, "RING_DEBUG", 10) == 0)
                continue;
            size_t len = strcspn(*e, "=");
            if (len < sizeof name) memcpy(name, *e, len), name[len] = '\0';
        }
        if (!name[0]) return;
        unsetenv(name);
    }
}

#endif
