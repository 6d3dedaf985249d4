//! The observability assets shipped for operators: deploy/prometheus (alert rules, their unit
//! tests, a scrape configuration) and deploy/grafana (the dashboard), checked on their own and
//! against a live `serve --queue` front end and worker, scraped directly and by a real Prometheus.

mod assets;
mod live;
mod prometheus;
mod promql;
mod scrape;
