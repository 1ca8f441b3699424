# Stand-in for postgres:17, built where no registry is reachable: Debian trixie's PostgreSQL 17
# with an entrypoint that honours what the official image documents: POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB, PGDATA (/var/lib/postgresql/data) and the scripts in
# /docker-entrypoint-initdb.d, run once by a temporary socket-only server on first start.
FROM users-pipeline/rootfs:trixie
RUN apt-get update -q \
  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-17 \
  && rm -rf /var/lib/apt/lists/* \
  && mkdir -p /var/lib/postgresql/data /var/run/postgresql /docker-entrypoint-initdb.d \
  && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
  && chmod 3777 /var/run/postgresql
ENV PATH=/usr/lib/postgresql/17/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["tini", "--", "docker-entrypoint.sh"]
CMD ["postgres"]
