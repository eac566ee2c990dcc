-- q6 average selling price by seller: for each closed auction, the average closing price
-- (the largest bid between its date_time and its expires) of its seller's last 10 closed
-- auctions, this one included. Nexmark's reference SQL with this generator's snake_case
-- names, both views timed by their date_time, and these differences:
-- - the closed auctions (Q) are q4's (see q4.sql: the bids' time also bounded by 0.335 s
--   after the auction's, and the inner GROUP BY grouping by A.expires too, so each
--   auction's max is emitted once, final, when the watermark passes its expires);
-- - the frame is 9 PRECEDING AND CURRENT ROW, the last 10 auctions as Nexmark's text
--   says (Flink's q6.sql writes 10 PRECEDING, 11 rows);
-- - the rows are ordered by when the auction closed, Q.expires (the closed auctions'
--   event time; the reference orders by B.date_time, which its GROUP BY does not keep),
--   then by Q.id, so auctions of one seller closing in the same millisecond have one
--   order (the reference leaves it open);
-- - Flink does not run the reference (an OVER over a GROUP BY's updates); here it reads
--   the final rows of the closed auctions, one output row per closed auction.
SELECT Q.seller,
       avg(Q.final) OVER (
           PARTITION BY Q.seller ORDER BY Q.expires, Q.id
           ROWS BETWEEN 9 PRECEDING AND CURRENT ROW
       ) AS avg
FROM (
    SELECT max(B.price) AS final, A.seller, A.expires, A.id
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction
      AND B.date_time BETWEEN A.date_time AND A.expires
      AND B.date_time <= A.date_time + INTERVAL '0.335' SECOND
    GROUP BY A.id, A.seller, A.expires
) AS Q
