"""Many hosts' recordings as one cluster: which card failed first, and what it took down (`npu-trace cluster`).

`hosts`: each recording's host (its identity) and clock (its wall-clock anchor and that clock's uncertainty);
`evidence`: what check's analysis of one recording says, as evidence ranked by how much it tells of a fault;
`incidents`: the evidence of every host on one aligned timeline, grouped into incidents, each with its origin and
consequences (pure); `read`: recordings in, their evidence out (check's columnar analysis, per recording);
`report`: text, JSON and JUnit; `trace`: one Perfetto or Chrome JSON trace of every host; `store`: dumps in an
S3-compatible object store (the agent ships them, `cluster s3://...` reads them).
"""
