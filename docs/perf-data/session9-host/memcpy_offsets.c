#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx2"))) static void fwd(char*d,const char*s,size_t n){ size_t i=0; for(;i+128<=n;i+=128){ __m256i a=_mm256_loadu_si256((const __m256i*)(s+i)),b=_mm256_loadu_si256((const __m256i*)(s+i+32)),c=_mm256_loadu_si256((const __m256i*)(s+i+64)),e=_mm256_loadu_si256((const __m256i*)(s+i+96)); _mm256_storeu_si256((__m256i*)(d+i),a);_mm256_storeu_si256((__m256i*)(d+i+32),b);_mm256_storeu_si256((__m256i*)(d+i+64),c);_mm256_storeu_si256((__m256i*)(d+i+96),e);} memcpy(d+i,s+i,n-i);}
__attribute__((target("avx2"))) static void bwd(char*d,const char*s,size_t n){ size_t i=n; while(i>=128){ i-=128; __m256i a=_mm256_loadu_si256((const __m256i*)(s+i)),b=_mm256_loadu_si256((const __m256i*)(s+i+32)),c=_mm256_loadu_si256((const __m256i*)(s+i+64)),e=_mm256_loadu_si256((const __m256i*)(s+i+96)); _mm256_storeu_si256((__m256i*)(d+i),a);_mm256_storeu_si256((__m256i*)(d+i+32),b);_mm256_storeu_si256((__m256i*)(d+i+64),c);_mm256_storeu_si256((__m256i*)(d+i+96),e);} memcpy(d,s,i);}
int main(int argc,char**argv){
  size_t n = argc>1? strtoul(argv[1],0,0): 262144;
  char *a = aligned_alloc(4096, 64<<20), *b = aligned_alloc(4096, 64<<20);
  memset(a,1,64<<20); memset(b,2,64<<20);
  int offs[] = {0, 8, 16, 64, 256, 512, 1024, 2048, 4032, 4088};
  const char *nm[]={"memcpy","fwd","bwd"};
  for (int k=0;k<10;k++){ printf("d%4d:", offs[k]); for (int m=0;m<3;m++){
    char *src = a; char *dst = b + offs[k];
    int it = (int)(1e9/ n); double t0=now();
    for(int i=0;i<it;i++){ if(m==0) memcpy(dst,src,n); else if(m==1) fwd(dst,src,n); else bwd(dst,src,n); __asm__ volatile(""::"r"(dst):"memory"); }
    double t=now()-t0; printf("  %s %6.2f", nm[m], n*(double)it/t/1e9);} printf("\n"); }
}
