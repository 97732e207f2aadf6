set terminal pngcairo size 1000,650
set output "python-writes.png"
set title "ferry-bench python: MiB/s by size (median of interleaved rounds)"
set logscale xy
set grid
set key outside right
set xlabel "array size"
set ylabel "MiB/s"
set xtics ("1K" 1024, "64K" 65536, "1M" 1048576, "16M" 16777216, "64M" 67108864, "256M" 268435456)
plot "python-writes-ferry-put.dat" using 1:2 with linespoints lw 2 title "ferry put" noenhanced, \
  "python-writes-ferry-put_object.dat" using 1:2 with linespoints lw 2 title "ferry put_object" noenhanced, \
  "python-writes-shm-put.dat" using 1:2 with linespoints lw 2 title "shm put" noenhanced, \
  "python-writes-shm_pickle-put_object.dat" using 1:2 with linespoints lw 2 title "shm+pickle put_object" noenhanced, \
  "python-writes-redis-set.dat" using 1:2 with linespoints lw 2 title "redis set" noenhanced, \
  "python-writes-pickle-dumps.dat" using 1:2 with linespoints lw 2 title "pickle dumps" noenhanced, \
  "python-writes-numpy-copyto.dat" using 1:2 with linespoints lw 2 title "numpy copyto" noenhanced
