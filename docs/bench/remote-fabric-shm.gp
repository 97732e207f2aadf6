# ferry-bench remote charts; run `gnuplot remote-fabric-shm.gp` in this directory.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1000,650
} else {
    set terminal png size 1000,650
}
set logscale xy
set format y "10^{%L}"
set grid
set key outside right
set xlabel "object size"
set xtics ("1K" 1024, "64K" 65536, "1M" 1048576, "16M" 16777216, "64M" 67108864, "256M" 268435456)
set output "remote-fabric-shm.png"
set title "ferry-bench remote: fetch over the fabric, shm" noenhanced
set ylabel "median MiB/s (size / p50; MiB = 2^{20} bytes)"
plot "remote-ferry-fabric_shm-fetch-eager.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "eager" noenhanced, \
  "remote-ferry-fabric_shm-fetch-rendezvous.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "rendezvous" noenhanced, \
  "remote-ferry-fabric_shm-fetch-hybrid.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "hybrid (eager up to 16K)" noenhanced, \
  "remote-ferry-tcp-fetch.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "tcp transport (ferry-tcp fetch)" noenhanced, \
  "remote-raw-tcp-stream.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "raw TCP stream" noenhanced, \
  "remote-raw-tcp-reqresp.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "raw TCP request/response" noenhanced, \
  "remote-memcpy-copy.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "memcpy" noenhanced, \
  "remote-cma-readv.dat" using 1:($1 / $3 * 1e6 / 1048576) with linespoints lw 2 title "process_vm_readv (cross-memory attach)" noenhanced
