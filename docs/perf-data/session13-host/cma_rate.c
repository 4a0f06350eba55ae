// Session 13 prototype (docs/PERFORMANCE.md): gcc -O3 -mavx2 FILE.c; see the run line there.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>
#include <sys/wait.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){ size_t S=atol(v[1]); size_t piece=atol(v[2]);
  char*src=aligned_alloc(4096,S); memset(src,1,S); char*dst=aligned_alloc(4096,S); memset(dst,2,S);
  double best=1e9; for(int i=0;i<10;i++){double t=now(); memcpy(dst,src,S); t=now()-t; if(t<best)best=t;}
  printf("memcpy %zu: %.2f GB/s\n",S,S/best/1e9);
  char*tmp=aligned_alloc(4096,piece); memset(tmp,0,piece);
  pid_t ch=fork(); if(!ch){pause();return 0;}
  // read own memory via readv from child? read from child (copy-on-write shared pages)
  best=1e9; for(int i=0;i<10;i++){double t=now(); for(size_t o=0;o<S;o+=piece){struct iovec l={tmp,piece},r={src+o,piece}; process_vm_readv(ch,&l,1,&r,1,0);} t=now()-t; if(t<best)best=t;}
  printf("readv into %zu tmp: %.2f GB/s\n",piece,S/best/1e9);
  best=1e9; for(int i=0;i<10;i++){double t=now(); struct iovec l={dst,S},r={src,S}; process_vm_readv(ch,&l,1,&r,1,0); t=now()-t; if(t<best)best=t;}
  printf("readv whole: %.2f GB/s\n",S/best/1e9);
  best=1e9; for(int i=0;i<10;i++){double t=now(); for(size_t o=0;o<S;o+=piece){memcpy(tmp,src+o,piece);} t=now()-t; if(t<best)best=t;}
  printf("memcpy into %zu tmp: %.2f GB/s\n",piece,S/best/1e9);
  kill(ch,9); wait(0); return 0;}
