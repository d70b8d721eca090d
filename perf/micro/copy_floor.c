/*
 * The memory work of one rank in a 2-rank shared-memory all-reduce of S bytes, done by plain
 * loops in one process: copy the own half into a segment, sum the peer half out of another
 * segment into the result, copy the result half in, copy the peer result half out. The time
 * is a floor for a two-copy design on this machine (docs/performance.md, 2026-11-22).
 * Not built by meson:  gcc -O3 -march=x86-64-v3 -o copy_floor perf/micro/copy_floor.c
 * Run one per core at once:  for s in 4194304 16777216; do ./copy_floor $s & ./copy_floor $s; wait; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t S=strtoul(argv[1],0,0), h=S/2, n=h/4;
  float *snd=malloc(S),*rcv=malloc(S),*seg=malloc(h),*seg2=malloc(h);
  memset(snd,1,S);memset(rcv,0,S);memset(seg,0,h);memset(seg2,0,h);
  double best=1e9;
  for(int r=0;r<20;r++){double t0=now();
    memcpy(seg,snd,h);                       /* RS copy-in of the own half */
    for(size_t i=0;i<n;i++) rcv[n+i]=seg2[i]+snd[n+i]; /* reduce the peer's half out of the segment */
    memcpy(seg,rcv+n,h);                     /* AG copy-in */
    memcpy(rcv,seg2,h);                      /* AG copy-out */
    double t=now()-t0; if(t<best)best=t;}
  printf("S=%zu: one core's work %.1f us -> busbw bound %.2f GB/s\n",S,best*1e6,S/best/1e9);
  return 0;}
