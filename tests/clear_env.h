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
    char names[64][64];
    int n = 0;
    /* Collected first: unsetenv while walking environ would skip entries. */
    for (char **e = environ; *e && n < 64; e++) {
        if (strncmp(*e, "RING_", 5) != 0 || strncmp(*e, "RING_TEST_", 10) == 0 || strncmp(*e, "RING_DEBUG", 10) == 0)
            continue;
        size_t len = strcspn(*e, "=");
        if (len >= sizeof names[0]) continue;
        memcpy(names[n], *e, len);
        names[n++][len] = '\0';
    }
    for (int i = 0; i < n; i++) unsetenv(names[i]);
}

#endif
