// bidirectional exchange microbench: mode 0 = nonblocking busy-poll one thread,
// 1 = blocking, send thread + recv in main, 2 = poll() one thread nonblocking
// Session 15 additions: mode 6 = mode 0 with the sends by vmsplice() into a
// pipe of CH bytes and splice() into the socket (zero-copy on the sending
// side; the receiver copies straight out of the sender's pages); BUF=bytes
// sets SO_SNDBUF/SO_RCVBUF.  Usage: tx BYTES ITERS MODE [LANES [CH]]
// (gcc -O2 -o tx tcp_exchange_splice.c -lpthread).  The pages are only safe
// to reuse once the peer has read them, which this bench knows from its
// per-iteration handshake; a library would need an acknowledgement.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <poll.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static size_t S; static int mode, iters, nl=1;
struct targ{int s; char*b; size_t n;};
static void* sender(void*p){struct targ*t=p; size_t o=0; while(o<t->n){ssize_t k=send(t->s,t->b+o,t->n-o,MSG_NOSIGNAL); if(k<=0){perror("send");exit(1);} o+=k;} return 0;}
#include <stdatomic.h>
static atomic_int rdone;
struct rarg{int s; char*b; size_t n;};
static void* receiver(void*p){struct rarg*t=p; size_t o=0; while(o<t->n){ssize_t k=recv(t->s,t->b+o,t->n-o,0); if(k<=0){perror("recv");exit(1);} o+=k;} atomic_fetch_add(&rdone,1); return 0;}
static void backoffwait(atomic_int*f,int want){int sp=0; while(atomic_load(f)<want){ sp++; if(sp<64)__builtin_ia32_pause(); else if(sp<2048) sched_yield(); else usleep(50);} }
struct job{pthread_mutex_t m; pthread_cond_t c; char*p; size_t n; int gen, done; int s; int send;};
static struct job J[2];
static size_t CH=524288;
static void* worker(void*a){struct job*j=a; int seen=0; for(;;){pthread_mutex_lock(&j->m); while(j->gen==seen)pthread_cond_wait(&j->c,&j->m); seen=j->gen; char*p=j->p; size_t n=j->n; pthread_mutex_unlock(&j->m);
  size_t o=0; while(o<n){ssize_t k=j->send?send(j->s,p+o,n-o,MSG_NOSIGNAL):recv(j->s,p+o,n-o,0); if(k<=0){perror("w");exit(1);} o+=k;} __atomic_store_n(&j->done,seen,__ATOMIC_RELEASE);} return 0;}
static void post(struct job*j,char*p,size_t n){pthread_mutex_lock(&j->m); j->p=p;j->n=n;j->gen++; pthread_cond_signal(&j->c); pthread_mutex_unlock(&j->m);}
static int started=0; static int pfd[2]; static size_t inpipe;
#include <sys/uio.h>

static void xchg(int*s, char*sb, char*rb){
  if(mode==5){ if(!started){started=1; for(int i=0;i<2;i++){pthread_mutex_init(&J[i].m,0);pthread_cond_init(&J[i].c,0);J[i].s=s[0];J[i].send=(i==0);J[i].gen=J[i].done=0; pthread_t t; pthread_create(&t,0,worker,&J[i]);}}
    size_t so=0, ro=0; int sp=0;
    while(so<S||ro<S){ int prog=0;
      if(so<S && __atomic_load_n(&J[0].done,__ATOMIC_ACQUIRE)==J[0].gen){ size_t n=S-so<CH?S-so:CH; post(&J[0],sb+so,n); so+=n; prog=1;}
      if(ro<S && __atomic_load_n(&J[1].done,__ATOMIC_ACQUIRE)==J[1].gen){ size_t n=S-ro<CH?S-ro:CH; post(&J[1],rb+ro,n); ro+=n; prog=1;}
      if(prog)sp=0; else {sp++; if(sp<64)__builtin_ia32_pause(); else if(sp<2048) sched_yield(); else usleep(50);} }
    while(__atomic_load_n(&J[0].done,__ATOMIC_ACQUIRE)!=J[0].gen || __atomic_load_n(&J[1].done,__ATOMIC_ACQUIRE)!=J[1].gen){ sched_yield(); }
    return; }
  if(mode==4){ pthread_t th[32]; struct targ ta[16]; struct rarg ra[16]; size_t per=S/nl; atomic_store(&rdone,0);
    for(int l=0;l<nl;l++){ta[l].s=s[l];ta[l].b=sb+l*per;ta[l].n=per;pthread_create(&th[l],0,sender,&ta[l]);
      ra[l].s=s[l];ra[l].b=rb+l*per;ra[l].n=per;pthread_create(&th[16+l],0,receiver,&ra[l]);}
    backoffwait(&rdone,nl);
    for(int l=0;l<nl;l++){pthread_join(th[l],0);pthread_join(th[16+l],0);} return; }
  if(mode==1){ pthread_t th[16]; struct targ ta[16]; size_t per=S/nl;
    for(int l=0;l<nl;l++){ta[l].s=s[l];ta[l].b=sb+l*per;ta[l].n=per;pthread_create(&th[l],0,sender,&ta[l]);}
    for(int l=0;l<nl;l++){ size_t o=0; while(o<per){ssize_t k=recv(s[l],rb+l*per+o,per-o,0); if(k<=0){perror("recv");exit(1);} o+=k;}}
    for(int l=0;l<nl;l++)pthread_join(th[l],0); return; }
  if(mode==6){ if(!started){started=1; if(pipe2(pfd,O_NONBLOCK)){perror("pipe");exit(1);} if(fcntl(pfd[1],F_SETPIPE_SZ,(int)CH)<0)perror("setpipe"); int fl=fcntl(s[0],F_GETFL); fcntl(s[0],F_SETFL,fl|O_NONBLOCK);}
    size_t so=0, sp_=0, ro=0; // so: bytes vmspliced into pipe; sp_: bytes spliced to socket
    while(sp_<S||ro<S){
      if(so<S && so-sp_<CH){ struct iovec v={sb+so, (S-so)<(CH-(so-sp_))?(S-so):(CH-(so-sp_))}; ssize_t k=vmsplice(pfd[1],&v,1,SPLICE_F_NONBLOCK); if(k>0)so+=k; else if(errno!=EAGAIN){perror("vms");exit(1);} }
      if(sp_<so){ ssize_t k=splice(pfd[0],0,s[0],0,so-sp_,SPLICE_F_NONBLOCK|SPLICE_F_MOVE); if(k>0)sp_+=k; else if(k<0&&errno!=EAGAIN){perror("spl");exit(1);} }
      if(ro<S){ssize_t k=recv(s[0],rb+ro,S-ro,MSG_DONTWAIT); if(k>0)ro+=k; else if(k==0||errno!=EAGAIN){perror("r");exit(1);}}
    } return; }
  size_t so=0, ro=0;
  while(so<S||ro<S){
    if(so<S){ssize_t k=send(s[0],sb+so,S-so,MSG_DONTWAIT|MSG_NOSIGNAL); if(k>0)so+=k; else if(errno!=EAGAIN){perror("s");exit(1);}}
    if(ro<S){ssize_t k=recv(s[0],rb+ro,S-ro,MSG_DONTWAIT); if(k>0)ro+=k; else if(k==0||errno!=EAGAIN){perror("r");exit(1);}}
    if(mode==2 && (so<S||ro<S)){struct pollfd p={s[0],(so<S?POLLOUT:0)|(ro<S?POLLIN:0),0}; poll(&p,1,-1);}
  }
}
int main(int argc,char**argv){ S=atol(argv[1]); iters=atoi(argv[2]); mode=atoi(argv[3]); if(argc>4)nl=atoi(argv[4]); if(argc>5)CH=atol(argv[5]);
  int ls=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(INADDR_LOOPBACK);
  bind(ls,(void*)&a,sizeof a); socklen_t l=sizeof a; getsockname(ls,(void*)&a,&l); listen(ls,16);
  char*sb=aligned_alloc(4096,S), *rb=aligned_alloc(4096,S); memset(sb,1,S); memset(rb,0,S);
  int child=fork(); int s[16]; int one=1;
  if(child==0){ for(int i=0;i<nl;i++){s[i]=socket(AF_INET,SOCK_STREAM,0); connect(s[i],(void*)&a,sizeof a);} }
  else { for(int i=0;i<nl;i++) s[i]=accept(ls,0,0); }
  for(int i=0;i<nl;i++){ setsockopt(s[i],IPPROTO_TCP,TCP_NODELAY,&one,4); if(getenv("BUF")){int b=atoi(getenv("BUF")); setsockopt(s[i],SOL_SOCKET,SO_SNDBUF,&b,4); setsockopt(s[i],SOL_SOCKET,SO_RCVBUF,&b,4);} }
  double best=1e9, tot=0;
  for(int i=0;i<iters;i++){ char c=0; send(s[0],&c,1,0); recv(s[0],&c,1,MSG_WAITALL); double t=now(); xchg(s,sb,rb); t=now()-t; if(i>=iters/5){tot+=t;} if(t<best)best=t; }
  if(child){ printf("mode %d lanes %d S=%zu best %.1f us mean %.1f us\n",mode,nl,S,best*1e6,tot/(iters-iters/5)*1e6); wait(0);} return 0;}
