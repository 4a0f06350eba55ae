// Session 13 prototype (docs/PERFORMANCE.md): gcc -O3 -mavx2 FILE.c; see the run line there.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <stdatomic.h>
#include <immintrin.h>
typedef struct { _Atomic long w[3]; char pad[64-24]; } Flag;
struct Sh { Flag f[2]; };
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void add(float*d,const float*a,const float*b,size_t n){for(size_t i=0;i<n;i++)d[i]=a[i]+b[i];}
static void waitf(struct Sh*s,int q,int k,long v){while(atomic_load(&s->f[q].w[k])<v)__builtin_ia32_pause();}
int main(int argc,char**argv){
  size_t S=(size_t)atol(argv[1]); size_t piece=(size_t)atol(argv[2]); int iters=atoi(argv[3]); int mode=argc>4?atoi(argv[4]):0;
  struct Sh*s=mmap(0,sizeof*s,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  float*snd[2],*rcv[2]; for(int i=0;i<2;i++){snd[i]=mmap(0,S,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);rcv[i]=mmap(0,S,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);}
  int me=fork()?0:1; int peer=1-me;
  size_t n=S/4;
  for(size_t i=0;i<n;i++){snd[me][i]=me+1;rcv[me][i]=0;}
  atomic_store(&s->f[me].w[0],1); waitf(s,peer,0,1);
  size_t half=S/2; size_t lo=me*half, plo=peer*half;
  double best=1e9, sum=0;
  for(int it=1;it<=iters;it++){
    long v=it+1;
    atomic_store(&s->f[me].w[0],v); waitf(s,peer,0,v);
    double t0=now();
    for(size_t off=0;off<half;off+=piece){ size_t b=piece<half-off?piece:half-off;
      add((float*)((char*)rcv[me]+lo+off),(float*)((char*)snd[0]+lo+off),(float*)((char*)snd[1]+lo+off),b/4);}
    atomic_store(&s->f[me].w[1],v); waitf(s,peer,1,v);
    if (mode==0) memcpy((char*)rcv[me]+plo,(char*)rcv[peer]+plo,half);
    else { // non-temporal copy
      char*d=(char*)rcv[me]+plo,*sr=(char*)rcv[peer]+plo; for(size_t i=0;i<half;i+=32){ _mm256_stream_si256((__m256i*)(d+i),_mm256_load_si256((__m256i*)(sr+i)));} _mm_sfence(); }
    atomic_store(&s->f[me].w[2],v); waitf(s,peer,2,v);
    double t=now()-t0; if(t<best)best=t; sum+=t;
    if(it==1) for(size_t i=0;i<n;i+=4099) if(rcv[me][i]!=3){printf("bad %zu %f\n",i,rcv[me][i]);return 1;}
  }
  if(me==0) printf("S=%zu mode=%d best %.1f us busbw %.2f GB/s mean %.2f\n",S,mode,best*1e6,S/best/1e9,S/(sum/iters)/1e9);
  if(me==0) wait(0);
  return 0;
}
