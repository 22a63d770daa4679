/*
 * check.h: the C tests' CHECK: a condition that must hold, else the
 * program prints where and why (prefixed with its name, prog, which the
 * including file defines) and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s: line %d: ", prog, __LINE__);    \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, "\n");                               \
			exit(1);                                             \
		}                                                            \
	} while (0)
