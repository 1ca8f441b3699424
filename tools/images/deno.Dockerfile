# Stand-in for denoland/deno:2.9.6 (Debian flavour), built where no registry is reachable.
# Like the official image: the deno binary on PATH, tini as PID 1 in front of an entrypoint that
# adds "deno" before a bare subcommand, a `deno` user (uid 1993) owning DENO_DIR=/deno-dir.
# On top: the host's CA store, because outgoing TLS (deno install from npm) passes a proxy.
FROM users-pipeline/rootfs:bookworm
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates \
  && ln -s /usr/bin/tini /tini \
  && groupadd --gid 1993 deno \
  && useradd --uid 1993 --gid deno --home-dir /deno-dir --shell /bin/sh deno \
  && mkdir -p /deno-dir && chown deno:deno /deno-dir
COPY deno /usr/bin/deno
COPY deno-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV DENO_DIR=/deno-dir/ DENO_INSTALL_ROOT=/usr/local DENO_TLS_CA_STORE=mozilla,system
ENTRYPOINT ["/tini", "--", "docker-entrypoint.sh"]
CMD ["eval", "console.log('Welcome to Deno!')"]
