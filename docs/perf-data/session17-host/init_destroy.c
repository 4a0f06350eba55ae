// init/destroy wall time of a 2-rank communicator, rank 0's view, median of N
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "flagcx.h"
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 int N=argc>1?atoi(argv[1]):20; double ti[200],td[200];

 for(int i=0;i<N;i++){ flagcxUniqueId id; if(r==0) flagcxGetUniqueId(&id); MPI_Bcast(&id,sizeof id,MPI_BYTE,0,MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD); double t0=now(); flagcxComm_t c; if(flagcxCommInitRank(&c,n,&id,r)){printf("init failed\n");return 1;}
  double t1=now(); MPI_Barrier(MPI_COMM_WORLD); double t2=now(); flagcxCommDestroy(c); double t3=now(); ti[i]=t1-t0; td[i]=t3-t2; }
 qsort(ti,N,sizeof(double),cmp); qsort(td,N,sizeof(double),cmp);
 if(r==0) printf("init median %.1f ms (min %.1f max %.1f), destroy median %.1f ms (min %.1f max %.1f)\n",ti[N/2],ti[0],ti[N-1],td[N/2],td[0],td[N-1]);
 MPI_Finalize(); return 0;}
