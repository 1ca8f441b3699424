# Stand-in for prom/prometheus:v2.42.0, built where no registry is reachable: Debian bookworm's
# prometheus package (2.42.0, the version the tag names, and the one the native stack runs), laid
# out like the official image: /bin/prometheus as the entrypoint, the configuration at
# /etc/prometheus/prometheus.yml (compose mounts the repo's prometheus/ there), the data in
# /prometheus as the user nobody, the UI and API on 9090. Debian's package serves the classic UI
# in place of the React one; the HTTP API, which the tests read, is the same.
FROM users-pipeline/rootfs:bookworm
RUN apt-get update -q \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus \
  && rm -rf /var/lib/apt/lists/* \
  && mkdir -p /prometheus && chown -R nobody:nogroup /prometheus /etc/prometheus
WORKDIR /prometheus
USER nobody
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
