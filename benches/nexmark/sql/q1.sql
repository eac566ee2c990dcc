-- q1 currency conversion. Nexmark multiplies by the decimal 0.908; like the DSL
-- version this stays in integers: floor(price * 908 / 1000) is price * 908 // 1000
-- (floor returns bigint, as in Spark).
SELECT auction, bidder, floor(price * 908 / 1000) AS price, date_time, extra FROM bid
