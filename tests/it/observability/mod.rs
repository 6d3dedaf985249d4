//! The observability assets shipped for operators: deploy/prometheus (alert rules, their unit
//! tests, a scrape configuration) and deploy/grafana (the dashboard), checked on their own and
//! against a live scrape of a gateway, a queue front end and a worker.

mod assets;
mod live;
mod promql;
