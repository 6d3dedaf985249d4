//! One conformance suite for every `Store`: each store promise and the model-based property is
//! written once, generic over a store factory ([`backend::Backend`]), and instantiated for the
//! embedded store (`conformance::memory::*`), one Redis (`conformance::redis::*`) and a Redis
//! Cluster (`conformance::cluster::*`), so the implementations cannot drift apart. Promises only
//! a fleet can break (re-covering a dead instance's callers, taking over from a dead leader,
//! `fleet.rs` and `takeover.rs`) run on the Redis backends alone; `fleet.rs` says why.

mod backend;
mod fleet;
mod model;
mod records;
mod retire;
mod reusable;
mod single_use;
mod takeover;

/// `#[tokio::test]`s calling `module::name::<Backend>()`.
macro_rules! async_tests {
    ($backend:ty; $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                super::$module::$name::<$backend>().await
            }
        )*
    };
}

/// Every promise of the `Store` trait, for one backend.
macro_rules! store_promises {
    ($backend:ty) => {
        async_tests!($backend;
            single_use::once_each_answer_has_one_owner_oldest_first,
            single_use::callers_in_one_millisecond_are_served_in_arrival_order,
            single_use::exact_demand_starts_only_the_missing_tasks,
            single_use::callers_arriving_at_once_take_the_pool_and_start_the_rest,
            single_use::a_rush_served_from_held_batches_hands_each_answer_out_once,
            single_use::fresh_only_answers_with_enough_life_are_handed_out,
            single_use::an_answer_expired_on_arrival_is_waste_not_a_handout,
            single_use::a_stale_answer_is_waste_and_restarts_a_task_for_an_uncovered_waiter,
            single_use::an_answer_expired_on_finish_restarts_a_task_for_its_waiter,
            single_use::a_failure_fails_only_a_waiter_no_task_covers,
            single_use::a_caller_that_leaves_hands_on_what_reached_it,
            single_use::put_goes_to_the_oldest_waiter_else_the_pool,
            single_use::a_refill_counts_in_flight_and_serves_a_waiter_first,
            single_use::a_waiter_on_one_instance_gets_an_answer_finished_on_another,
            single_use::cover_claims_nothing_while_every_waiter_is_covered,
            reusable::followers_share_one_task_and_the_answer_is_cached,
            reusable::a_failure_reaches_every_follower_and_is_not_cached,
            reusable::an_evicted_answer_is_solved_again,
            reusable::an_old_leaders_finish_leaves_the_current_leader_alone,
            reusable::a_reusable_target_adds_no_per_target_figures,
            reusable::nobody_takes_over_a_live_leader_or_a_finished_target,
            records::a_record_is_finished_once_and_reported_once,
            records::a_pending_records_request_is_kept_until_it_ends,
            records::a_long_poll_ends_when_any_instance_finishes_the_task,
            records::a_sweep_keeps_live_records_and_drops_expired_pooled_answers,
            records::a_sweep_drops_records_past_their_retention_or_pending_limit,
            retire::idle_empty_targets_retire_and_busy_ones_stay,
            retire::callers_racing_a_retirer_keep_every_promise,
            model::saved_sequences_match_the_model,
        );

        #[test]
        fn random_sequences_match_the_model() {
            super::model::random_sequences_match_the_model::<$backend>()
        }
    };
}

/// The promises only a fleet on Redis can break, for one Redis topology.
macro_rules! fleet_promises {
    ($servers:ty) => {
        async_tests!($servers;
            fleet::cover_claims_tasks_for_waiters_a_dead_instance_left_uncovered,
            takeover::a_dead_leaders_followers_are_taken_over_by_one_instance,
            takeover::a_leaders_lock_is_renewed_while_its_task_outlives_the_lease,
            takeover::a_leader_whose_lock_ran_out_is_fenced_off,
            takeover::followers_that_left_stop_keeping_a_target_alive,
        );
    };
}

mod memory {
    store_promises!(super::backend::Memory);
}

mod redis {
    store_promises!(super::backend::SingleRedis);
    fleet_promises!(crate::support::redis::RedisServer);
}

mod cluster {
    store_promises!(super::backend::ClusterRedis);
    fleet_promises!(crate::support::redis::RedisCluster);
}
