#include <cstdio>
int main() { std::puts("perf-launch: under construction"); return 0; }
