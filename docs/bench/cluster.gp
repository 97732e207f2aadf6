# ferry-bench cluster charts; run `gnuplot cluster.gp` in this directory.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1000,650
} else {
    set terminal png size 1000,650
}
set grid
set key top left
set xlabel "nodes (N)"
set ylabel "seconds to the last node"
set output "cluster-broadcast.png"
set title "broadcast of 256M from one node to N-1 (1gbit links)" noenhanced
set yrange [0:*]
plot "cluster-n.dat" using 1:2 with linespoints title "ferry", \
     "" using 1:8 with linespoints title "ferry before (--before: --relay-min 0)", \
     "" using 1:9 with lines dashtype 4 title "one node's fetch alone (a pair)", \
     "" using 1:7 with lines dashtype 3 title "N-1 fetches, one after another, from the one holder", \
     "" using 1:3 with lines dashtype 2 title "one link's time (raw TCP): a pipeline's bound"
set output "cluster-shuffle.png"
set title "shuffle: every node receives 224M from the N-1 others at once (1gbit links)" noenhanced
plot "cluster-n.dat" using 1:4 with linespoints title "ferry", \
     "" using 1:6 with linespoints title "raw TCP all-to-all of the same bytes", \
     "" using 1:5 with lines dashtype 2 title "bound: what a node receives over its link (raw TCP)"
set output "cluster-pair.png"
set title "pair: one node fetches from another (1gbit links)" noenhanced
set logscale x 2
set xlabel "object size (bytes)"
set ylabel "MiB/s"
plot "cluster-pair.dat" using 1:2 with linespoints title "ferry", \
     "" using 1:3 with linespoints title "raw TCP stream"
