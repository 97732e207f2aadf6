# ferry-bench local charts; run `gnuplot local.gp` in this directory.
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
set xtics ("1K" 1024, "64K" 65536, "1M" 1048576, "16M" 16777216, "64M" 67108864)
set output "local-throughput.png"
set title "ferry-bench local: throughput (MiB = 2^{20} bytes)"
set ylabel "MiB/s"
plot "local-ferry-put.dat" using 1:5 with linespoints lw 2 title "ferry:put", \
  "local-ferry-get.dat" using 1:5 with linespoints lw 2 title "ferry:get", \
  "local-ferry-get+read.dat" using 1:5 with linespoints lw 2 title "ferry:get+read", \
  "local-redis-set.dat" using 1:5 with linespoints lw 2 title "redis:set", \
  "local-redis-get.dat" using 1:5 with linespoints lw 2 title "redis:get", \
  "local-unix-send+ack.dat" using 1:5 with linespoints lw 2 title "unix:send+ack", \
  "local-memcpy-copy.dat" using 1:5 with linespoints lw 2 title "memcpy:copy"
set output "local-latency.png"
set title "ferry-bench local: median latency per operation"
set ylabel "p50 latency (µs)"
plot "local-ferry-put.dat" using 1:3 with linespoints lw 2 title "ferry:put", \
  "local-ferry-get.dat" using 1:3 with linespoints lw 2 title "ferry:get", \
  "local-ferry-get+read.dat" using 1:3 with linespoints lw 2 title "ferry:get+read", \
  "local-redis-set.dat" using 1:3 with linespoints lw 2 title "redis:set", \
  "local-redis-get.dat" using 1:3 with linespoints lw 2 title "redis:get", \
  "local-unix-send+ack.dat" using 1:3 with linespoints lw 2 title "unix:send+ack", \
  "local-memcpy-copy.dat" using 1:3 with linespoints lw 2 title "memcpy:copy"
