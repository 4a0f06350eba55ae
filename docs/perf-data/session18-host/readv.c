// process_vm_readv speed: child owns a buffer, parent reads it repeatedly.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  size_t max=16<<20; int p[2],q[2]; pipe(p); pipe(q);
  pid_t c=fork();
  if(!c){ char*b; posix_memalign((void**)&b,64,max); memset(b,1,max); write(p[1],&b,sizeof b); char x; read(q[0],&x,1); return 0;}
  char*rb; read(p[0],&rb,sizeof rb);
  char*dst; posix_memalign((void**)&dst,64,max); memset(dst,0,max);
  size_t piece = argc>1? strtoul(argv[1],0,0):0;
  for(size_t n=64<<10;n<=max;n*=4){
    int it = (int)(200000000/n); if(it>2000) it=2000;
    double best=1e18;
    for(int r=0;r<5;r++){
      double t0=now();
      for(int i=0;i<it;i++){
        size_t done=0; while(done<n){ size_t k=n-done; if(piece&&k>piece)k=piece;
          struct iovec l={dst+done,k}, f={rb+done,k}; ssize_t g=process_vm_readv(c,&l,1,&f,1,0); if(g<=0){perror("readv");return 1;} done+=g;}
      }
      double t=(now()-t0)/it; if(t<best)best=t;
    }
    double t0=now(); for(int i=0;i<200;i++) memcpy(dst,dst+ (n<max/2? max/2: 0),n); double mc=(now()-t0)/200;
    printf("%8zu readv %8.2f us  %6.2f GB/s   memcpy %8.2f us\n",n,best,n/best/1e3,mc);
  }
  write(q[1],"x",1); wait(0); return 0;
}
