#!/bin/sh
# As the official deno image's entrypoint: `docker run image run x.ts` means `deno run x.ts`.
set -e
case "$1" in
-*|bench|bundle|cache|check|compile|completions|coverage|doc|eval|fmt|help|info|init|install|\
jupyter|lint|lsp|outdated|publish|remove|repl|run|serve|task|test|types|uninstall|upgrade)
  set -- deno "$@" ;;
esac
exec "$@"
