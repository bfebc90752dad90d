#!/bin/sh
# Load through the REST Proxy from a pod with curl (no Kafka client): one record per request, to
# partition seq % PARTITIONS, value "<partition>:<seq>" (binary format), RATE requests a second through
# URL (the cluster's Service) until SIGTERM. One line per acknowledged record:
#     ACK <partition> <offset> <seq> <sent at> <acknowledged at>
# and ERR lines for records whose answer was not an offset (the record may or may not be written: the
# REST Proxy does not resend it, and neither does this script).
set -u
partitions=${PARTITIONS:-3}
interval=$(awk "BEGIN {print 1 / ${RATE:-20}}")
stopping=0
trap 'stopping=1' TERM
echo "START $(date +%s.%N)"
seq=0
while [ "$stopping" = 0 ]; do
  p=$((seq % partitions))
  value=$(printf '%s:%s' "$p" "$seq" | base64)
  sent=$(date +%s.%N)
  # a connect to a deleted pod's address (the Service has not dropped it yet) gets no answer: give up
  # after 3 s, as the Kafka workloads do (socket.connection.setup.timeout.ms), not at --max-time
  answer=$(curl -sS --connect-timeout 3 --max-time 60 -X POST -H 'Content-Type: application/vnd.kafka.binary.v2+json' \
    --data "{\"records\":[{\"value\":\"$value\"}]}" "$URL/topics/$TOPIC/partitions/$p" 2>&1)
  at=$(date +%s.%N)
  offset=$(printf '%s' "$answer" | jq -r '.offsets[0]? | select(.error_code == null) | .offset | numbers' \
    2>/dev/null)
  if [ -n "$offset" ]; then
    echo "ACK $p $offset $seq $sent $at"
  else
    echo "ERR $p $seq $(printf '%s' "$answer" | tr '\n' ' ' | cut -c1-300)"
  fi
  seq=$((seq + 1))
  sleep "$interval"
done
echo "DONE $seq"
