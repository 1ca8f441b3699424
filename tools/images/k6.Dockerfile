# Stand-in for grafana/k6:1.8.1, built where no registry is reachable: the k6 the test suite
# compiles from its Go module, as user k6 (uid 12345) in /home/k6 with `k6` as entrypoint.
FROM users-pipeline/rootfs:bookworm
RUN groupadd --gid 12345 k6 && useradd --uid 12345 --gid k6 --create-home k6
COPY k6 /usr/bin/k6
USER k6
WORKDIR /home/k6
ENTRYPOINT ["k6"]
