-- q5 hot items: per sliding window of 10 s every 2 s, the auctions with the most bids.
-- Nexmark's reference SQL with this generator's snake_case names and one difference: the
-- window bounds are selected too, as window_start and window_end (the reference selects
-- auction and num), as in DuckDB's reference (queries.py), so the rows can be compared
-- exactly. The counts per auction and window are computed once: the plan holds them
-- twice, equal, and the lowering reads one stream twice. MaxBids groups the counts by
-- their window: it aggregates each window's counts once, when complete, as Flink does.
SELECT AuctionBids.auction, AuctionBids.num,
       AuctionBids.starttime AS window_start, AuctionBids.endtime AS window_end
FROM (
    SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
        FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime
   AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn
