# Stand-in for redis:7.0, built where no registry is reachable: Debian bookworm's redis-server
# (7.0.x), run as the redis user in /data like the official image, which is where compose mounts
# the volume that holds the append-only file.
FROM users-pipeline/rootfs:bookworm
RUN apt-get update -q \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    redis-server redis-tools \
  && rm -rf /var/lib/apt/lists/* \
  && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
VOLUME /data
EXPOSE 6379
ENTRYPOINT ["tini", "--", "docker-entrypoint.sh"]
CMD ["redis-server"]
