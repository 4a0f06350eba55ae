// Session 13 prototype (docs/PERFORMANCE.md): gcc -O3 -mavx2 FILE.c; see the run line there.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){ size_t S=atol(argv[1]); int iters=atoi(argv[2]); int bufsz=argc>3?atoi(argv[3]):0;
  int ls=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(INADDR_LOOPBACK); a.sin_port=0;
  bind(ls,(void*)&a,sizeof a); socklen_t l=sizeof a; getsockname(ls,(void*)&a,&l); listen(ls,1);
  char*buf=aligned_alloc(4096,S); memset(buf,1,S);
  if(fork()==0){ int s=socket(AF_INET,SOCK_STREAM,0); if(bufsz){setsockopt(s,SOL_SOCKET,SO_SNDBUF,&bufsz,4);} connect(s,(void*)&a,sizeof a); int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
    for(int i=0;i<iters;i++){ size_t o=0; while(o<S){ssize_t k=send(s,buf+o,S-o,0); if(k<=0)exit(1); o+=k;} char c; recv(s,&c,1,MSG_WAITALL);} exit(0);}
  int c=accept(ls,0,0); if(bufsz){setsockopt(c,SOL_SOCKET,SO_RCVBUF,&bufsz,4);} double best=1e9;
  for(int i=0;i<iters;i++){ double t=now(); size_t o=0; while(o<S){ssize_t k=recv(c,buf+o,S-o,0); if(k<=0)return 1; o+=k;} t=now()-t; if(t<best)best=t; send(c,"x",1,0);}
  printf("S=%zu buf=%d best %.1f us %.2f GB/s\n",S,bufsz,best*1e6,S/best/1e9); wait(0); return 0;}
