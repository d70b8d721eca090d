/*
 * process_vm_readv (cross-memory attach, one copy by the kernel) against two memcpy through a
 * shared segment, in pieces of ARGV[1] bytes over 64 MiB (docs/performance.md, 2026-11-22).
 * Not built by meson:  gcc -O2 -o cma_vs_memcpy perf/micro/cma_vs_memcpy.c
 * Run:  for c in 65536 524288 2097152; do ./cma_vs_memcpy $c; done
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t S=64<<20, C=argc>1?strtoul(argv[1],0,0):512<<10;
  char *src=malloc(S); memset(src,1,S);
  int p2c[2],c2p[2]; pipe(p2c); pipe(c2p);
  char *seg=mmap(0,C*4,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  pid_t pid=fork();
  if(!pid){ char b; read(p2c[0],&b,1); _exit(0);} // child holds src (copy-on-write, same content)
  char *dst=malloc(S); memset(dst,0,S);
  double best1=1e9,best2=1e9;
  for(int rep=0;rep<5;rep++){
    double t0=now();
    for(size_t o=0;o<S;o+=C){ struct iovec l={dst+o,C},r={src+o,C}; if(process_vm_readv(pid,&l,1,&r,1,0)!=(ssize_t)C){perror("cma");return 1;} }
    double t1=now(); if(t1-t0<best1)best1=t1-t0;
    t0=now();
    for(size_t o=0;o<S;o+=C){ memcpy(seg+(o/C%4)*C,src+o,C); memcpy(dst+o,seg+(o/C%4)*C,C);}
    t1=now(); if(t1-t0<best2)best2=t1-t0;
  }
  printf("chunk %zu KiB: process_vm_readv %.2f GB/s, memcpy in+out through a segment %.2f GB/s\n",C>>10,S/best1/1e9,S/best2/1e9);
  write(p2c[1],"x",1); wait(0); return 0;}
