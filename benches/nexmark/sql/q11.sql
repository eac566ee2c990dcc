-- q11 user sessions: the bids per bidder and session (gap 10 s). Nexmark's reference
-- SQL groups by SESSION(date_time, INTERVAL '10' SECOND); this is Flink's windowing
-- table function spelling of it. As in the DSL version, bids exactly 10 s apart are in
-- two sessions.
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end
