// Per-call time of a 2-rank heap-buffer broadcast (root 0) three ways:
// enqueue-ahead (n calls, one sync), sync after every call, and the NULL stream.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "flagcx.h"
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec*1e-3;}
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 size_t bytes=argc>1?strtoul(argv[1],0,0):16384; int N=argc>2?atoi(argv[2]):20000;
 flagcxUniqueId id; if(r==0) flagcxGetUniqueId(&id); MPI_Bcast(&id,sizeof id,MPI_BYTE,0,MPI_COMM_WORLD);
 flagcxComm_t c; if(flagcxCommInitRank(&c,n,&id,r)) return 1;
 flagcxStream_t s; flagcxHandlerGroup_t h; flagcxHandleInit(&h); h->devHandle->streamCreate(&s);
 char *a; posix_memalign((void**)&a,64,bytes); memset(a,r+1,bytes);
 for(int round=0;round<3;round++){
  double t[3];
  for(int mode=0;mode<3;mode++){ if(getenv("ONLY_AHEAD")&&mode) {t[mode]=0; continue;}
   for(int i=0;i<200;i++){ flagcxBroadcast(a,a,bytes,flagcxChar,0,c,s); h->devHandle->streamSynchronize(s);}
   MPI_Barrier(MPI_COMM_WORLD); double t0=now();
   for(int i=0;i<N;i++){
     if(mode==2) flagcxBroadcast(a,a,bytes,flagcxChar,0,c,NULL);
     else { flagcxBroadcast(a,a,bytes,flagcxChar,0,c,s); if(mode==1) h->devHandle->streamSynchronize(s);} }
   if(mode==0) h->devHandle->streamSynchronize(s);
   double mine=(now()-t0)/N, worst; MPI_Allreduce(&mine,&worst,1,MPI_DOUBLE,MPI_MAX,MPI_COMM_WORLD); t[mode]=worst;
  }
  double tm; MPI_Barrier(MPI_COMM_WORLD); double t0=now(); for(int i=0;i<N;i++) MPI_Bcast(a,(int)bytes,MPI_CHAR,0,MPI_COMM_WORLD);
  double mine=(now()-t0)/N; MPI_Allreduce(&mine,&tm,1,MPI_DOUBLE,MPI_MAX,MPI_COMM_WORLD);
  if(r==0) printf("%zu B in place: ahead %.2f us, sync each %.2f us, NULL stream %.2f us, MPI_Bcast %.2f us\n",bytes,t[0],t[1],t[2],tm);
 }
 flagcxCommDestroy(c); MPI_Finalize(); return 0;}
