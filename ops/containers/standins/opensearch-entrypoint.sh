#!/bin/bash
# As the official image: environment variables with a dot in their name (discovery.type=...)
# become -E settings (network.host is 0.0.0.0 in its opensearch.yml).
set -e
settings=()
while IFS='=' read -r -d '' name value; do
  [[ "$name" == *.* ]] && settings+=("-E$name=$value")
done < <(env -0)
exec /usr/share/opensearch/bin/opensearch "${settings[@]}" "$@"
