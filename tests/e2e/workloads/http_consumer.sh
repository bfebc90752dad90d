#!/bin/sh
# A REST consumer instance from a pod with curl: created through URL (the cluster's Service), then
# used through the base_uri it answers with (the broker pod that holds it), reading TOPIC from the
# beginning until EXPECTED records came or 120 s passed; commits, deletes the instance. Prints
#     BASE <base_uri>   READ <records so far>   COMMITTED <json>   DONE <records>
set -eu
v2='Content-Type: application/vnd.kafka.v2+json'
base=$(curl -sSf -X POST -H "$v2" --data '{"format":"binary","auto.offset.reset":"earliest"}' \
  "$URL/consumers/e2e-http" | jq -r .base_uri)
echo "BASE $base"
curl -sSf -X POST -H "$v2" --data "{\"topics\":[\"$TOPIC\"]}" "$base/subscription"
read=0
deadline=$(($(date +%s) + 120))
while [ "$read" -lt "$EXPECTED" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  got=$(curl -sSf -H 'Accept: application/vnd.kafka.binary.v2+json' "$base/records?timeout=2000" | jq length)
  read=$((read + got))
  echo "READ $read"
done
curl -sSf -X POST -H "$v2" "$base/offsets"
echo "COMMITTED $(curl -sSf -X GET -H "$v2" --data "{\"partitions\":[{\"topic\":\"$TOPIC\",\"partition\":0}]}" \
  "$base/offsets")"
curl -sSf -X DELETE "$base"
echo "DONE $read"
