set terminal pngcairo size 1000,650
set output "python-reads.png"
set title "ferry-bench python: p50 latency (µs) by size (median of interleaved rounds)"
set logscale xy
set grid
set key outside right
set xlabel "array size"
set ylabel "p50 latency (µs)"
set xtics ("1K" 1024, "64K" 65536, "1M" 1048576, "16M" 16777216, "64M" 67108864, "256M" 268435456)
plot "python-reads-ferry-get.dat" using 1:2 with linespoints lw 2 title "ferry get" noenhanced, \
  "python-reads-ferry-get_object.dat" using 1:2 with linespoints lw 2 title "ferry get_object" noenhanced, \
  "python-reads-shm-get.dat" using 1:2 with linespoints lw 2 title "shm get" noenhanced, \
  "python-reads-shm_pickle-get_object.dat" using 1:2 with linespoints lw 2 title "shm+pickle get_object" noenhanced, \
  "python-reads-redis-get.dat" using 1:2 with linespoints lw 2 title "redis get" noenhanced, \
  "python-reads-pickle-loads.dat" using 1:2 with linespoints lw 2 title "pickle loads" noenhanced
