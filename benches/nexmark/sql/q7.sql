-- q7 highest bid: the bids priced at the max of their tumbling 10 s window. Nexmark's
-- reference SQL (nexmark-flink's current q7) with this generator's snake_case names and
-- one difference: the window's max is timed at its TUMBLE_ROWTIME, window_end - 1 ms, as
-- in the DSL version and DuckDB's reference (queries.py): a bid matches when its time is in
-- [rowtime - 10 s, rowtime], written here on window_end (10.001 s to 1 ms before it); the
-- current nexmark-flink SQL compares with window_end itself. The maxes are timed by their
-- window_end (renamed date_time): an interval join, as the DSL version.
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end
) AS B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10.001' SECOND
                      AND B1.date_time - INTERVAL '0.001' SECOND
