# ferry-bench remote charts; run `gnuplot remote.gp` in this directory.
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
set output "remote-throughput.png"
set title "ferry-bench remote: throughput (MiB = 2^{20} bytes)"
set ylabel "MiB/s"
plot "remote-ferry-tcp-fetch.dat" using 1:5 with linespoints lw 2 title "ferry-tcp:fetch" noenhanced, \
  "remote-ferry-tcp-fetch-batch.dat" using 1:5 with linespoints lw 2 title "ferry-tcp:fetch-batch" noenhanced, \
  "remote-redis-tcp-get.dat" using 1:5 with linespoints lw 2 title "redis-tcp:get" noenhanced, \
  "remote-raw-tcp-stream.dat" using 1:5 with linespoints lw 2 title "raw-tcp:stream" noenhanced, \
  "remote-raw-tcp-reqresp.dat" using 1:5 with linespoints lw 2 title "raw-tcp:reqresp" noenhanced, \
  "remote-cma-readv.dat" using 1:5 with linespoints lw 2 title "cma:readv" noenhanced
set output "remote-latency.png"
set title "ferry-bench remote: median latency per operation"
set ylabel "p50 latency (µs)"
plot "remote-ferry-tcp-fetch.dat" using 1:3 with linespoints lw 2 title "ferry-tcp:fetch" noenhanced, \
  "remote-ferry-tcp-fetch-batch.dat" using 1:3 with linespoints lw 2 title "ferry-tcp:fetch-batch" noenhanced, \
  "remote-redis-tcp-get.dat" using 1:3 with linespoints lw 2 title "redis-tcp:get" noenhanced, \
  "remote-raw-tcp-stream.dat" using 1:3 with linespoints lw 2 title "raw-tcp:stream" noenhanced, \
  "remote-raw-tcp-reqresp.dat" using 1:3 with linespoints lw 2 title "raw-tcp:reqresp" noenhanced, \
  "remote-cma-readv.dat" using 1:3 with linespoints lw 2 title "cma:readv" noenhanced
