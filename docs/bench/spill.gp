# ferry-bench spill charts; run `gnuplot spill.gp` in this directory.
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
set xtics ("64K" 65536, "1M" 1048576, "64M" 67108864, "1K" 1024)
set output "spill-throughput.png"
set title "ferry-bench spill: throughput (MiB = 2^{20} bytes)"
set ylabel "MiB/s"
plot "spill-ferry-spill.dat" using 1:5 with linespoints lw 2 title "ferry:spill" noenhanced, \
  "spill-ferry-restore.dat" using 1:5 with linespoints lw 2 title "ferry:restore" noenhanced, \
  "spill-disk-write.dat" using 1:5 with linespoints lw 2 title "disk:write" noenhanced, \
  "spill-disk-read.dat" using 1:5 with linespoints lw 2 title "disk:read" noenhanced
set output "spill-latency.png"
set title "ferry-bench spill: median latency per operation"
set ylabel "p50 latency (µs)"
plot "spill-ferry-spill.dat" using 1:3 with linespoints lw 2 title "ferry:spill" noenhanced, \
  "spill-ferry-restore.dat" using 1:3 with linespoints lw 2 title "ferry:restore" noenhanced, \
  "spill-disk-write.dat" using 1:3 with linespoints lw 2 title "disk:write" noenhanced, \
  "spill-disk-read.dat" using 1:3 with linespoints lw 2 title "disk:read" noenhanced
