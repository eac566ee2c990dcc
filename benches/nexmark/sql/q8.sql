-- q8 monitor new users: the persons who opened an auction in the tumbling 10 s window in
-- which they registered. Nexmark's reference SQL as is, with this generator's snake_case
-- names: both inputs are windowed GROUP BYs, joined on the seller and the window bounds
-- (their window ends time both: an interval join of 0 ms). The DSL version window-joins
-- the persons without grouping them (a person registers once, so the rows are the same).
SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
    GROUP BY id, name, window_start, window_end
) AS P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
    GROUP BY seller, window_start, window_end
) AS A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
