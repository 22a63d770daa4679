/*
 * front.h: between front.c and the goroce_* stubs generated beside it
 * (scripts/build-libgoroce.sh): each stub's pointer starts at a loader
 * that calls gq_engine_load.
 */
#ifndef GOROCE_FRONT_H
#define GOROCE_FRONT_H

#include <stddef.h>

int gq_engine_load(void);

/* Generated: point every goroce_* at the engine h (0; -1 with why set
 * when h lacks one), or back at the loaders. */
int gq_engine_bind(void *h, char *why, size_t n);
void gq_engine_unbind(void);

#endif
