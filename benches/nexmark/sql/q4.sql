-- q4 average price for a category: per category, the average closing price (the largest
-- bid between an auction's date_time and its expires) of its auctions that had a bid.
-- Nexmark's reference SQL with this generator's snake_case names, both views timed by
-- their date_time, and three differences:
-- - the bids' event time is also bounded by a constant, 0.335 s after the auction's
--   (the generator's longest auction at its default 10,000 events/s, as the DSL version
--   bounds its interval join: max_auction_duration_ms); every bid before expires is
--   within it, so no row changes, but it bounds the interval join's state, which a
--   per-row bound (expires) cannot;
-- - the inner GROUP BY also groups by A.expires (one value per auction, so the same
--   groups): each auction's max is then emitted once, final, when the watermark passes
--   its expires (no later bid can change it), and the outer GROUP BY runs over these
--   final rows, not over a running max's updates (Flink instead retracts);
-- - the outer GROUP BY is a running average (one updated row per category per batch)
--   that also counts the closed auctions (num), as the DSL version: the harness keeps
--   each category's row of the largest num, the reference's one row per category.
SELECT Q.category, avg(Q.final) AS avg, count(*) AS num
FROM (
    SELECT max(B.price) AS final, A.category
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction
      AND B.date_time BETWEEN A.date_time AND A.expires
      AND B.date_time <= A.date_time + INTERVAL '0.335' SECOND
    GROUP BY A.id, A.category, A.expires
) AS Q
GROUP BY Q.category
